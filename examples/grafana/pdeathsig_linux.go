package grafana

import "syscall"

// pdeathsig kills the server if the process that started it dies first.
func pdeathsig() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
