// Command pause holds a pod sandbox's namespaces: it waits for SIGINT or
// SIGTERM and exits 0, reaping any zombie re-parented to it meanwhile (it is
// PID 1 of the pod's PID namespace when that is shared). Same contract as
// Kubernetes' build/pause/linux/pause.c, written for the offline test image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		os.Stdout.WriteString("pause (kube-rdma e2e)\n")
		return
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
