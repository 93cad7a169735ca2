//go:build !linux

package grafana

import "syscall"

func pdeathsig() *syscall.SysProcAttr { return nil }
