package keys_test

import (
	"fmt"

	"github.com/tollgate-go/tollgate/core/keys"
)

// The key scheme: the tenant is the hash tag, escaped.
func ExampleKeys_Bucket() {
	k, _ := keys.New("rl")
	for _, id := range []string{"t42", "acme:eu{1}"} {
		key, _ := k.Bucket(id, "export")
		fmt.Println(key)
	}
	// Output:
	// rl:{t42}:export
	// rl:{acme%3Aeu%7B1%7D}:export
}
