package consumers

import (
	"fmt"
	"os"

	"github.com/oklog/ulid/v2"

	"github.com/salvagehq/salvage/streams"
)

// processID is the default id of a worker or orchestrator: host, pid and
// a random suffix, made a valid token (host names may hold dots).
func processID() string {
	host, _ := os.Hostname()
	return streams.SafeToken(fmt.Sprintf("%s-%d-%s", host, os.Getpid(), ulid.Make().String()[20:]))
}

// ProcessID is a fresh id for a process: host, pid and a random suffix, as
// a subject token. Workers and orchestrators take one when not given one.
func ProcessID() string { return processID() }
