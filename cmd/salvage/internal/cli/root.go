// Package cli holds the salvage commands. Main runs them against any
// reader and writers, so tests call the CLI in process.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

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

// exitError ends a command with a specific exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// env is what every command shares.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	conn           natsconf.ConnectConfig
	logLevel       string
	logFormat      string
	// refused is what the server refused this command's user, if anything.
	refused *refusal
}

// Main runs the salvage CLI with args and returns the process exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, refused: &refusal{}}
	root := e.rootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := root.ExecuteContext(ctx)
	var ee *exitError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ee):
		if ee.err != nil {
			fmt.Fprintln(stderr, message(ee.err))
		}
		return ee.code
	default:
		fmt.Fprintln(stderr, message(err))
		return ExitError
	}
}

// message is how the CLI prints err: once prefixed "salvage:", though the
// library's own errors begin with "salvage:" too.
func message(err error) string {
	return "salvage: " + strings.TrimPrefix(err.Error(), "salvage: ")
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

func (e *env) rootCmd() *cobra.Command {
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
	f.StringVar(&e.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&e.logFormat, "log-format", "auto", "log format: json, console, or auto (console on a terminal)")
	// --help lists the commands by what they are for.
	for _, g := range []struct {
		id, title string
		cmds      []*cobra.Command
	}{
		{"run", "Run a deployment:", []*cobra.Command{e.upCmd(), e.provisionCmd()}},
		{"jobs", "Submit and follow jobs:", []*cobra.Command{e.submitCmd(), e.statusCmd(), e.resultsCmd(), e.traceCmd(), e.jobsCmd(), e.cancelCmd(), e.approveCmd(), e.tenantCmd()}},
		{"operate", "Operate:", []*cobra.Command{e.dlqCmd(), e.breakersCmd(), e.pipelinesCmd(), e.pauseCmd(), e.resumeCmd(), e.workersCmd(), e.limitsCmd(), e.storageCmd()}},
		{"try", "Try it:", []*cobra.Command{e.demoCmd(), e.chaosCmd(), e.simCmd()}},
		{"measure", "Measure:", []*cobra.Command{e.benchCmd()}},
	} {
		root.AddGroup(&cobra.Group{ID: g.id, Title: g.title})
		for _, c := range g.cmds {
			c.GroupID = g.id
			root.AddCommand(c)
		}
	}
	root.AddCommand(e.benchWorkerCmd(), e.benchBaselineWorkerCmd())
	strictGroups(root)
	return root
}

// logger builds the process logger; only cmd/ does this.
func (e *env) logger() (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(e.logLevel)
	if err != nil {
		return zerolog.Nop(), fmt.Errorf("--log-level: %w", err)
	}
	var w io.Writer = e.stderr
	console := e.logFormat == "console"
	if e.logFormat == "auto" {
		if f, ok := e.stderr.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				console = true
			}
		}
	} else if e.logFormat != "json" && e.logFormat != "console" {
		return zerolog.Nop(), fmt.Errorf("--log-format %q: want json, console or auto", e.logFormat)
	}
	if console {
		w = zerolog.ConsoleWriter{Out: e.stderr, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// connect opens a client connection to --server / NATS_URL.
func (e *env) connect(name string) (*nats.Conn, jetstream.JetStream, error) {
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
