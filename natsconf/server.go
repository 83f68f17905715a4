package natsconf

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Defaults for the embedded server.
const (
	// HostDefault is the loopback address the embedded server listens on.
	HostDefault = "127.0.0.1"
	// PortDefault is the client port of the embedded server.
	PortDefault = 4222
	// StoreDirDefault is where the embedded server keeps its JetStream files.
	StoreDirDefault = "./salvage-data"
	// MaxPayloadDefault is the server's max_payload (1 MiB).
	MaxPayloadDefault = 1 << 20
	// readyTimeoutDefault bounds how long Start waits for the server.
	readyTimeoutDefault = 10 * time.Second
)

// lockFileName is the file in the store directory whose flock marks the
// store as taken by a running embedded server.
const lockFileName = "salvage.lock"

// SyncAlways is the SyncInterval value that makes the server fsync every
// write before acknowledging it. It is the embedded default: a single node
// has no replica to fall back on.
const SyncAlways = time.Duration(-1)

// ServerConfig configures an embedded server. Zero fields take their
// defaults; StoreDir is required. DefaultServerConfig is what `salvage up`
// uses (it also sets SyncInterval to SyncAlways).
type ServerConfig struct {
	// Listen is the client address as host:port; port -1 picks a free
	// one. When set it wins over Host and Port.
	Listen string
	// Host is the listen address. Default HostDefault.
	Host string
	// Port is the client port; -1 picks a free one (tests). Default
	// PortDefault.
	Port int
	// StoreDir holds JetStream data. Restarting on the same directory keeps
	// every stream and bucket. Default StoreDirDefault.
	StoreDir string
	// SyncInterval is JetStream's sync_interval: SyncAlways fsyncs every
	// write (what DefaultServerConfig and `salvage up` use); 0 keeps the
	// server's own default (2 minutes, acks before fsync); any positive
	// value is used as is.
	SyncInterval time.Duration
	// ServerName names the server in advisories and `nats server` output.
	ServerName string
	// MaxPayload is the largest message the server accepts. Default 1 MiB.
	MaxPayload int32
	// ReadyTimeout bounds how long Start waits. Default readyTimeoutDefault.
	ReadyTimeout time.Duration
	// Logging turns on the server's own log output (to stderr).
	Logging bool
	// ClusterName, ClusterListen (host:port of the route listener) and
	// Routes (nats-route://host:port of every node, this one included)
	// make the server one node of a JetStream cluster; StartCluster sets
	// them. ServerName must then be unique in the cluster.
	ClusterName   string
	ClusterListen string
	Routes        []string
	// TLS, when set, makes clients connect with TLS; with ClientCAs set
	// the server also verifies client certificates (mutual TLS).
	TLS *tls.Config
}

// DefaultServerConfig returns the configuration `salvage up` uses.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{
		Host:         HostDefault,
		Port:         PortDefault,
		StoreDir:     StoreDirDefault,
		SyncInterval: SyncAlways,
		ServerName:   "salvage",
		MaxPayload:   MaxPayloadDefault,
		ReadyTimeout: readyTimeoutDefault,
	}
}

// withDefaults resolves Listen and fills zero fields.
func (c ServerConfig) withDefaults() (ServerConfig, error) {
	if c.Listen != "" {
		host, port, err := net.SplitHostPort(c.Listen)
		if err != nil {
			return c, fmt.Errorf("%w: Listen %q: %v", ErrInvalidConfig, c.Listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return c, fmt.Errorf("%w: Listen %q: bad port", ErrInvalidConfig, c.Listen)
		}
		c.Host, c.Port = host, p
	}
	if c.Host == "" {
		c.Host = HostDefault
	}
	if c.Port == 0 {
		c.Port = PortDefault
	}
	if c.ServerName == "" {
		c.ServerName = "salvage"
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = readyTimeoutDefault
	}
	if c.MaxPayload == 0 {
		c.MaxPayload = MaxPayloadDefault
	}
	return c, c.validate()
}

func (c ServerConfig) validate() error {
	if c.StoreDir == "" {
		return fmt.Errorf("%w: StoreDir is empty", ErrInvalidConfig)
	}
	if c.Port < -1 || c.Port > 65535 {
		return fmt.Errorf("%w: Port %d out of range", ErrInvalidConfig, c.Port)
	}
	if c.MaxPayload < 0 {
		return fmt.Errorf("%w: MaxPayload %d is negative", ErrInvalidConfig, c.MaxPayload)
	}
	return nil
}

// SyncIntervalString renders a SyncInterval the way the server config file
// spells it, for reports and logs.
func SyncIntervalString(d time.Duration) string {
	switch {
	case d == SyncAlways:
		return "always"
	case d == 0:
		return "default"
	default:
		return d.String()
	}
}

// ParseSyncInterval reads "always", "default" or a Go duration.
func ParseSyncInterval(s string) (time.Duration, error) {
	switch s {
	case "always":
		return SyncAlways, nil
	case "default", "":
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%w: sync interval %q: want always, default or a positive duration", ErrInvalidConfig, s)
	}
	return d, nil
}

// Server is a running embedded NATS server with JetStream.
type Server struct {
	ns   *server.Server
	lock *storeLock
}

// StartServer starts an embedded JetStream server and blocks until it accepts
// connections or cfg.ReadyTimeout passes. It holds an exclusive lock on the
// store directory until Shutdown and returns ErrStoreLocked when another
// process holds it, ErrServerNotReady when the server did not come up, and
// the listen error when the port is taken.
func StartServer(cfg ServerConfig) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName: cfg.ServerName,
		Host:       cfg.Host,
		Port:       cfg.Port,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		MaxPayload: cfg.MaxPayload,
		NoSigs:     true,
		// The embedded server never listens anywhere else.
		HTTPPort: 0,
	}
	if cfg.TLS != nil {
		opts.TLSConfig, opts.TLS, opts.TLSVerify = cfg.TLS, true, cfg.TLS.ClientCAs != nil
		opts.TLSTimeout = 2
	}
	if cfg.ClusterName != "" {
		if err := clusterOptions(opts, cfg); err != nil {
			return nil, err
		}
	}
	switch {
	case cfg.SyncInterval == SyncAlways:
		opts.SyncAlways = true
	case cfg.SyncInterval > 0:
		opts.SyncInterval = cfg.SyncInterval
	}
	// Fail fast with the real reason when a port is taken; the server
	// itself would only log it and never become ready.
	if cfg.Port > 0 {
		if err := probeListen(net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))); err != nil {
			return nil, err
		}
	}
	if opts.Cluster.Port > 0 {
		if err := probeListen(net.JoinHostPort(opts.Cluster.Host, strconv.Itoa(opts.Cluster.Port))); err != nil {
			return nil, err
		}
	}
	return start(opts, cfg.ReadyTimeout, cfg.Logging)
}

// probeListen binds addr and lets it go: the listen error (wrapping
// syscall.EADDRINUSE when the port is taken) or nil.
func probeListen(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("natsconf: listen %s: %w", addr, err)
	}
	return l.Close()
}

// start locks opts.StoreDir, starts a server with opts and waits up to
// ready for it to accept connections.
func start(opts *server.Options, ready time.Duration, logging bool) (srv *Server, err error) {
	lock, err := lockStore(opts.StoreDir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.release()
		}
	}()
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsconf: new server: %w", err)
	}
	if logging {
		ns.ConfigureLogger()
	}
	go ns.Start()
	if !ns.ReadyForConnections(ready) {
		ns.Shutdown()
		return nil, fmt.Errorf("%w after %s (store %s)", ErrServerNotReady, ready, opts.StoreDir)
	}
	return &Server{ns: ns, lock: lock}, nil
}

// ClientURL is the nats:// URL clients use to reach the server.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// NATS exposes the underlying server for tests and diagnostics.
func (s *Server) NATS() *server.Server { return s.ns }

// Shutdown stops the server gracefully: clients are disconnected, JetStream
// flushes its stores, and Shutdown returns once the server has stopped. It is
// safe to call more than once.
func (s *Server) Shutdown() {
	if s == nil || s.ns == nil {
		return
	}
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	s.lock.release()
}

// StartConfigFile starts a server from a nats-server config file (those
// natsconf ships, or yours) with its store in storeDir, listening on a
// free loopback port, for tests and examples: accounts, users,
// permissions, TLS and JetStream limits come from the file. It holds the
// store's lock like StartServer.
func StartConfigFile(file, storeDir string) (*Server, error) {
	opts, err := server.ProcessConfigFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidConfig, file, err)
	}
	opts.Host, opts.Port, opts.StoreDir, opts.NoSigs, opts.HTTPPort = HostDefault, server.RANDOM_PORT, storeDir, true, 0
	opts.Cluster.Port, opts.Routes = 0, nil
	return start(opts, readyTimeoutDefault, false)
}
