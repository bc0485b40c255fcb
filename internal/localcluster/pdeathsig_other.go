//go:build !linux

package localcluster

import "syscall"

// dieWithParentAttr: only Linux kills a child when its parent dies;
// elsewhere a child outlives a parent that is killed.
func dieWithParentAttr() *syscall.SysProcAttr { return nil }
