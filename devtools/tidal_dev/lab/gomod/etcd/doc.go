// Package lab pins the upstream etcd release the Tidal lab runs.
package lab
