//go:build !linux

package demo

import "os/exec"

// DieWithParent does nothing where the kernel cannot tie a child's life
// to its parent's; the demo and bench stop their children on the way out.
func DieWithParent(*exec.Cmd) {}
