package flow

import (
	"fmt"
	"os"

	"github.com/oklog/ulid/v2"

	"github.com/salvagehq/salvage/streams"
)

// ProcessID is a fresh id for a process: host, pid and a random suffix, as
// a subject token (host names may hold dots). Workers and orchestrators
// take one when not given one.
func ProcessID() string {
	host, _ := os.Hostname()
	return streams.SafeToken(fmt.Sprintf("%s-%d-%s", host, os.Getpid(), ulid.Make().String()[20:]))
}
