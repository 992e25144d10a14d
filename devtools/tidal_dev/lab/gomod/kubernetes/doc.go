// Package lab pins the upstream Kubernetes release whose kube-apiserver and
// kube-controller-manager the Tidal lab runs. Nothing here is compiled into
// Tidal; `tidal lab` builds the upstream commands from this module.
package lab
