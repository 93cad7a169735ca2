package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
)

// NewRedisClient returns a client of the Redis rawURL names, without
// connecting yet:
//
//	redis://[user:pass@]host:port/db          one server (rediss:// for TLS; unix:// a socket)
//	redis+cluster://[user:pass@]h1:p1,h2:p2   a Cluster: seeds comma-separated,
//	                                          or repeated as ?addr=h2:p2&addr=h3:p3
//	redis+sentinel://[user:pass@]s1:p1,s2:p2/master[/db]
//	                                          a Sentinel-managed master: Sentinels
//	                                          comma-separated (or ?addr=), the master
//	                                          name in the path or as ?master_name=
//
// rediss+cluster:// and rediss+sentinel:// are the TLS forms. A port left out
// is 6379, 26379 for a Sentinel. Query parameters are go-redis's own
// (redis.ParseURL, ParseClusterURL, ParseFailoverURL: dial_timeout=3s,
// pool_size=20, max_retries=-1, ...). For Sentinel, as in go-redis, the user
// and password of the URL authenticate to the Sentinels and the username
// and password parameters to the master.
//
// Errors wrap core.ErrInvalidConfig and name the URL with its password
// hidden.
func NewRedisClient(rawURL string) (redis.UniversalClient, error) {
	if rawURL == "" {
		return nil, fmt.Errorf("%w: empty Redis URL (want redis://host:port/db, redis+cluster://... or redis+sentinel://...)", core.ErrInvalidConfig)
	}
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, badRedisURL(rawURL, errors.New("no scheme (want redis://, rediss://, unix://, redis+cluster:// or redis+sentinel://)"))
	}
	var c redis.UniversalClient
	var err error
	switch strings.ToLower(scheme) {
	case "redis", "rediss", "unix":
		c, err = openURL(rawURL, redis.ParseURL, redis.NewClient)
	case "redis+cluster", "rediss+cluster":
		c, err = openSeeds(rawURL, "6379", noDatabase, redis.ParseClusterURL, redis.NewClusterClient)
	case "redis+sentinel", "rediss+sentinel":
		c, err = openSeeds(rawURL, "26379", masterInQuery, redis.ParseFailoverURL, redis.NewFailoverClient)
	default:
		err = fmt.Errorf("unsupported scheme %q (want redis://, rediss://, unix://, redis+cluster:// or redis+sentinel://)", scheme)
	}
	if err != nil {
		return nil, badRedisURL(rawURL, err)
	}
	return c, nil
}

// openURL parses a go-redis URL with parse and opens its client with
// newClient.
func openURL[O any, C redis.UniversalClient](u string, parse func(string) (*O, error), newClient func(*O) C) (redis.UniversalClient, error) {
	opt, err := parse(u)
	if err != nil {
		return nil, err
	}
	return newClient(opt), nil
}

// openSeeds opens the client of a +cluster or +sentinel URL: its seeds
// made a go-redis URL (seedURL), which check refuses or completes, then
// parsed and opened.
func openSeeds[O any, C redis.UniversalClient](rawURL, defaultPort string, check func(*url.URL) error, parse func(string) (*O, error), newClient func(*O) C) (redis.UniversalClient, error) {
	u, err := seedURL(rawURL, defaultPort)
	if err == nil {
		err = check(u)
	}
	if err != nil {
		return nil, err
	}
	return openURL(u.String(), parse, newClient)
}

// noDatabase refuses a path in a Cluster URL.
func noDatabase(u *url.URL) error {
	if p := strings.Trim(u.Path, "/"); p != "" {
		return fmt.Errorf("a Cluster has no databases: remove the path %q", u.Path)
	}
	u.Path = ""
	return nil
}

// seedURL parses a +cluster or +sentinel URL into the plain redis:// or
// rediss:// URL go-redis reads: the first host stays the URL's host, the
// others become addr parameters, and each gets defaultPort if it has none.
func seedURL(rawURL, defaultPort string) (*url.URL, error) {
	// The host list is cut out before url.Parse, which takes
	// "h1:7000,h2" for a host with a bad port.
	scheme, rest, _ := strings.Cut(rawURL, "://")
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	var userinfo string
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo, authority = authority[:at+1], authority[at+1:]
	}
	if authority == "" {
		return nil, errors.New("no host: name at least one node, host:port")
	}
	hosts := strings.Split(authority, ",")
	for i, h := range hosts {
		if h == "" {
			return nil, fmt.Errorf("empty host in the list %q", authority)
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			if !strings.Contains(err.Error(), "missing port") {
				return nil, fmt.Errorf("host %q: %w", h, err)
			}
			hosts[i] = net.JoinHostPort(h, defaultPort)
		}
	}
	base := strings.TrimSuffix(strings.TrimSuffix(strings.ToLower(scheme), "+cluster"), "+sentinel")
	u, err := url.Parse(base + "://" + userinfo + hosts[0] + tail)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, password and all
		}
		return nil, err
	}
	if len(hosts) > 1 {
		q := u.Query()
		q["addr"] = append(hosts[1:], q["addr"]...)
		u.RawQuery = q.Encode()
	}
	return u, nil
}

// masterInQuery moves a Sentinel URL's master name from its path (/master
// or /master/db) into the master_name parameter and leaves the database
// number in the path, as ParseFailoverURL wants them.
func masterInQuery(u *url.URL) error {
	q := u.Query()
	inQuery := q.Get("master_name")
	parts := strings.FieldsFunc(u.Path, func(r rune) bool { return r == '/' })
	var inPath, db string
	switch len(parts) {
	case 0:
	case 1:
		inPath = parts[0]
	case 2:
		inPath, db = parts[0], parts[1]
	default:
		return fmt.Errorf("path %q: want /master or /master/db", u.Path)
	}
	switch {
	case inPath == "" && inQuery == "":
		return errors.New("no master name: give it as the path (redis+sentinel://host:26379/mymaster) or as ?master_name=mymaster")
	case inPath != "" && inQuery != "" && inPath != inQuery:
		return fmt.Errorf("master name %q in the path and %q in master_name disagree", inPath, inQuery)
	case inPath != "":
		q.Set("master_name", inPath)
	}
	u.Path = ""
	if db != "" {
		u.Path = "/" + db
	}
	u.RawPath = ""
	u.RawQuery = q.Encode()
	return nil
}

// badRedisURL is the error for a URL that cannot be used; it names the URL
// with its password hidden.
func badRedisURL(rawURL string, err error) error {
	return fmt.Errorf("%w: Redis URL %s: %v", core.ErrInvalidConfig, RedactURL(rawURL), err)
}

// RedactURL returns rawURL with its passwords, if any (in the user
// information and in password and sentinel_password parameters), replaced
// by xxxxx, for logs and error messages. It reads every form
// [NewRedisClient] does, host lists included.
func RedactURL(rawURL string) string {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return "(not a URL)"
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		if user, _, hasPass := strings.Cut(authority[:at], ":"); hasPass {
			authority = user + ":xxxxx" + authority[at:]
		}
	}
	path, query, hasQuery := strings.Cut(tail, "?")
	if hasQuery {
		query, _, _ = strings.Cut(query, "#")
		q, err := url.ParseQuery(query)
		if err != nil {
			query = "(unparsable)"
		} else if q.Has("password") || q.Has("sentinel_password") {
			for _, k := range []string{"password", "sentinel_password"} {
				if q.Has(k) {
					q.Set(k, "xxxxx")
				}
			}
			query = q.Encode()
		}
		path += "?" + query
	}
	return scheme + "://" + authority + path
}
