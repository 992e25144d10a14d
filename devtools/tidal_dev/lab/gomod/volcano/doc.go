// Package lab pins the upstream Volcano release whose scheduler and
// controller-manager the Tidal lab runs.
package lab
