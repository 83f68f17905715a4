package natsconf

import "errors"

var (
	// ErrInvalidConfig is returned when a server or connection setting is
	// out of range; the message names the setting.
	ErrInvalidConfig = errors.New("natsconf: invalid config")
	// ErrServerNotReady is returned by StartServer when the embedded server
	// did not accept connections in time.
	ErrServerNotReady = errors.New("natsconf: embedded server not ready")
)
