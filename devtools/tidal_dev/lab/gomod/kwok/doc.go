// Package lab pins the upstream kwok release that simulates the lab's nodes.
package lab
