// Package lab pins the containerd release the lab's real nodes run (its CRI and NRI plugins,
// the runc shim and ctr). Nothing here is compiled into Tidal; `tidal lab build` builds the
// upstream commands from this module, and ./pause, the pod sandbox's only process.
package lab
