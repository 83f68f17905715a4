//go:build !linux

package cli

import "os/exec"

// dieWithParent does nothing where the kernel cannot tie a child's life
// to its parent's; the demo and bench stop their children on the way out.
func dieWithParent(*exec.Cmd) {}
