package demo

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcMemory reads a process's resident memory and its high-water mark
// from /proc, in bytes; zeros where /proc is not there.
func ProcMemory(pid int) (rss, peak int64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			peak = kb << 10
		}
	}
	return rss, peak
}
