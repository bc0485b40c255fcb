package bench

import (
	"os"
	"strconv"
	"syscall"
)

// Yield lowers the scheduling priority of every thread of this process to
// the nice level (Linux sets it per thread; threads started later inherit
// it from the thread that starts them), so that a load generator on the same
// machine as the servers it measures does not starve them: on two cores it
// otherwise takes a third of the CPU. It returns the number of threads
// changed.
func Yield(nice int) int {
	entries, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice) == nil {
			n++
		}
	}
	return n
}
