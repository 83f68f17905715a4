//go:build !unix

package natsconf

// storeLock is a no-op where flock does not exist: there, nothing stops
// two processes from sharing a store.
type storeLock struct{}

func lockStore(string) (*storeLock, error) { return &storeLock{}, nil }

func (*storeLock) release() {}
