// Command pause is the pod sandbox image of the lab's real nodes (no registry is reachable to
// pull one): it sleeps until SIGTERM or SIGINT, as Kubernetes' own pause does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
