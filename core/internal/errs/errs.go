// Package errs holds the sentinel errors that package core exports and its
// subpackages (quota, gate, keys) wrap, so that every package of the module
// reports one error value per kind without importing core, and the option
// error every constructor of the module shares.
package errs

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// The sentinels: core.ErrInvalidRequest, core.ErrInvalidConfig,
// core.ErrResolve and quota.ErrInvalid are these values.
var (
	InvalidQuota   = errors.New("tollgate: invalid quota")
	InvalidRequest = errors.New("tollgate: invalid request")
	InvalidConfig  = errors.New("tollgate: invalid configuration")
	Resolve        = errors.New("tollgate: cannot resolve quota")
)

// optionError is a value an option cannot use. It names the option, so the
// error points at the call to fix, and wraps InvalidConfig (and the
// validation error behind it, if any).
type optionError struct {
	option, msg string
	cause       error
}

func (e *optionError) Error() string { return "tollgate: " + e.option + ": " + e.msg }

func (e *optionError) Unwrap() []error {
	if e.cause != nil {
		return []error{InvalidConfig, e.cause}
	}
	return []error{InvalidConfig}
}

// BadOption is the error of option given a value it cannot use.
func BadOption(option, format string, args ...any) error {
	return &optionError{option: option, msg: fmt.Sprintf(format, args...)}
}

// BadValue is BadOption for a value that failed its own validation, err.
func BadValue(option string, err error) error {
	return &optionError{option: option, msg: strings.TrimPrefix(err.Error(), "tollgate: "), cause: err}
}

// BadPart is BadValue with what the value was (e.g. "class ") before the
// validation error's text.
func BadPart(option, what string, err error) error {
	return &optionError{option: option, msg: what + strings.TrimPrefix(err.Error(), "tollgate: "), cause: err}
}

// SetPositive sets *dst to v, the value of option (what names it in the
// error), which must be positive.
func SetPositive[T int | time.Duration](dst *T, option, what string, v T) error {
	if v <= 0 {
		return BadOption(option, "%s must be positive, got %v", what, v)
	}
	*dst = v
	return nil
}
