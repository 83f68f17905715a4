package salvage

import "time"

// Tests look for partitions made while a process runs every 200 ms, not
// every 30 s.
func init() { partitionsCheckEvery = 200 * time.Millisecond }
