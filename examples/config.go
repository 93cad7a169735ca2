package examples

import _ "embed" // for DefaultConfig

// DefaultConfig is tollgate.yaml, the tier file the example services serve
// when TOLLGATE_CONFIG names none.
//
//go:embed tollgate.yaml
var DefaultConfig []byte
