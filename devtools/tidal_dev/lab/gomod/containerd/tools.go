//go:build tools

// The upstream commands `tidal lab build` compiles from this module (kept in go.mod by this file).
package lab

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
