// Package operator holds the operator's salvage commands (run a
// deployment, submit and follow jobs, operate it) and what every command
// shares: the connection and log flags, the exit codes, the output
// helpers. Package cli puts them together with the demo's and the bench's.
package operator

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/natsconf"
)

// Exit codes of `salvage submit --wait` and of failed commands.
const (
	ExitOK         = 0
	ExitError      = 1
	ExitPartial    = 3
	ExitIncomplete = 4
	ExitCancelled  = 5
)

// Exit ends a command with a specific exit code.
type Exit struct {
	Code int
	Err  error
}

// Error is the error the command ended with, or its exit code.
func (e *Exit) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Err.Error()
}

// Unwrap returns the error the command ended with.
func (e *Exit) Unwrap() error { return e.Err }

// Env is what every command shares: where it reads and writes, and the
// connection and log flags.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	conn           natsconf.ConnectConfig
	LogLevel       string
	LogFormat      string
	// refused is what the server refused this command's user, if anything.
	refused *refusal
}

// NewEnv returns what the commands share, reading stdin and writing
// stdout and stderr.
func NewEnv(stdin io.Reader, stdout, stderr io.Writer) *Env {
	return &Env{Stdin: stdin, Stdout: stdout, Stderr: stderr, refused: &refusal{}}
}

// Message is how the CLI prints err: once prefixed "salvage:", though
// the library's own errors begin with "salvage:" too.
func Message(err error) string {
	return "salvage: " + strings.TrimPrefix(err.Error(), "salvage: ")
}

// ErrorCode is the stable name of what err is (salvage.ErrorCode): the
// service's, when the service answered it.
func ErrorCode(err error) string {
	var se *serviceError
	if errors.As(err, &se) && se.name != "" {
		return se.name
	}
	return salvage.ErrorCode(err)
}

// JSONError is how a command run with --json reports its error on
// stdout: {"error": {"code", "message"}}.
type JSONError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Group is one heading of salvage --help and its commands.
type Group struct {
	ID, Title string
	Commands  []*cobra.Command
}

// strictGroups gives every command that only groups others (dlq, bench)
// a run that refuses an unknown subcommand with a non-zero exit, instead
// of cobra's help and exit 0, so a script's typo does not pass for
// success; with no subcommand it prints help.
func strictGroups(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		strictGroups(sub)
	}
	if !cmd.HasSubCommands() || cmd.Runnable() || !cmd.HasParent() {
		return
	}
	cmd.Args = cobra.ArbitraryArgs
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		}
		return errors.New(msg + " (see " + cmd.CommandPath() + " --help)")
	}
}

// Root returns the salvage command: the shared flags, the operator's
// commands in the run, jobs and operate groups, then groups, and the
// hidden commands (run by the bench as processes, not listed).
func (e *Env) Root(groups []Group, hidden ...*cobra.Command) *cobra.Command {
	root := &cobra.Command{
		Use:           "salvage",
		Short:         "Failure recovery for long-running agent pipelines on NATS JetStream",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	f := root.PersistentFlags()
	f.StringVarP(&e.conn.URL, "server", "s", "", "NATS server URLs (default $NATS_URL, else "+natsconf.URLDefault+"); for up, use an existing deployment instead of embedding one")
	f.StringVar(&e.conn.Context, "context", "", "nats CLI context to connect with (default $NATS_CONTEXT); for up, use that deployment instead of embedding one")
	f.StringVar(&e.conn.Creds, "creds", "", "user credentials file")
	f.StringVar(&e.conn.NKey, "nkey", "", "user nkey seed file")
	f.StringVar(&e.conn.User, "user", "", "user name or token")
	f.StringVar(&e.conn.Password, "password", "", "password")
	f.StringVar(&e.conn.InboxPrefix, "inbox-prefix", "", "prefix of this connection's reply subjects instead of _INBOX (a server that keeps users' replies apart allows each user only _INBOX_<user>.>)")
	f.StringVar(&e.conn.TLSCert, "tlscert", "", "TLS client certificate file")
	f.StringVar(&e.conn.TLSKey, "tlskey", "", "TLS client key file")
	f.StringVar(&e.conn.TLSCA, "tlsca", "", "TLS trusted CA file")
	f.StringVar(&e.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&e.LogFormat, "log-format", "auto", "log format: json, console, or auto (console on a terminal)")
	// --help lists the commands by what they are for.
	groups = append([]Group{
		{"run", "Run a deployment:", []*cobra.Command{e.upCmd(), e.provisionCmd(), e.passwdCmd()}},
		{"jobs", "Submit and follow jobs:", []*cobra.Command{e.submitCmd(), e.statusCmd(), e.resultsCmd(), e.traceCmd(), e.jobsCmd(), e.cancelCmd(), e.approvalsCmd(), e.approveCmd(), e.heldCmd(), e.tenantCmd()}},
		{"operate", "Operate:", []*cobra.Command{e.dlqCmd(), e.breakersCmd(), e.pipelinesCmd(), e.pauseCmd(), e.resumeCmd(), e.workersCmd(), e.limitsCmd(), e.auditCmd(), e.storageCmd()}},
	}, groups...)
	for _, g := range groups {
		root.AddGroup(&cobra.Group{ID: g.ID, Title: g.Title})
		for _, c := range g.Commands {
			c.GroupID = g.ID
			root.AddCommand(c)
		}
	}
	root.AddCommand(hidden...)
	strictGroups(root)
	return root
}

// Logger builds the process Logger; only cmd/ does this.
func (e *Env) Logger() (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(e.LogLevel)
	if err != nil {
		return zerolog.Nop(), fmt.Errorf("--log-level: %w", err)
	}
	var w io.Writer = e.Stderr
	console := e.LogFormat == "console"
	if e.LogFormat == "auto" {
		if f, ok := e.Stderr.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				console = true
			}
		}
	} else if e.LogFormat != "json" && e.LogFormat != "console" {
		return zerolog.Nop(), fmt.Errorf("--log-format %q: want json, console or auto", e.LogFormat)
	}
	if console {
		w = zerolog.ConsoleWriter{Out: e.Stderr, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// Connect opens a client connection to --server / NATS_URL.
func (e *Env) Connect(name string) (*nats.Conn, jetstream.JetStream, error) {
	c := e.conn
	c.Name = name
	if c.OnPermissionViolation == nil {
		c.OnPermissionViolation = e.refused.record
	}
	nc, err := natsconf.Connect(c)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}
