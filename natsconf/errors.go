package natsconf

import "errors"

var (
	// ErrInvalidConfig is returned when a server or connection setting is
	// out of range; the message names the setting.
	ErrInvalidConfig = errors.New("natsconf: invalid config")
	// ErrServerNotReady is returned by StartServer when the embedded server
	// did not accept connections in time.
	ErrServerNotReady = errors.New("natsconf: embedded server not ready")
	// ErrStoreLocked is returned by StartServer when another process
	// runs a server on the same store directory; the message names the
	// store and that process's pid. nats-server does not lock its store,
	// and two servers writing one store lose acknowledged writes.
	ErrStoreLocked = errors.New("natsconf: store locked")
	// ErrUnreachable is returned by AwaitConnected when the NATS
	// deployment did not answer in time; the message names its URL.
	ErrUnreachable = errors.New("natsconf: NATS server not reachable")
)
