// Package cli is the salvage command: the operator's commands (package
// operator), the demo and simulator (package demo) and the bench (package
// bench) under one root. Main runs it against any reader and writers, so
// tests call the CLI in process.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/salvagehq/salvage/cmd/salvage/internal/bench"
	"github.com/salvagehq/salvage/cmd/salvage/internal/demo"
	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
)

// Main runs the salvage CLI with args and returns the process exit code
// (operator.ExitOK and the others).
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := operator.NewEnv(stdin, stdout, stderr)
	d := &demo.Env{Env: e}
	b := &bench.Env{Env: d}
	root := e.Root([]operator.Group{
		{ID: "try", Title: "Try it:", Commands: []*cobra.Command{d.DemoCmd(), d.ChaosCmd(), d.SimCmd()}},
		{ID: "measure", Title: "Measure:", Commands: []*cobra.Command{b.BenchCmd()}},
	}, b.BenchWorkerCmd(), b.BaselineWorkerCmd())
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd, err := root.ExecuteContextC(ctx)
	var ee *operator.Exit
	code, cause := operator.ExitError, err
	switch {
	case err == nil:
		return operator.ExitOK
	case errors.As(err, &ee):
		code, cause = ee.Code, ee.Err
	}
	if cause == nil {
		return code
	}
	// Under --json the error is JSON on stdout, with a stable code, where
	// the answer would have been.
	if jsonFlag(cmd) {
		var je operator.JSONError
		je.Error.Code, je.Error.Message = operator.ErrorCode(cause), operator.Message(cause)
		_ = json.NewEncoder(stdout).Encode(je)
		return code
	}
	fmt.Fprintln(stderr, operator.Message(cause))
	return code
}

// jsonFlag reports whether cmd ran with --json.
func jsonFlag(cmd *cobra.Command) bool {
	if cmd == nil {
		return false
	}
	f := cmd.Flags().Lookup("json")
	return f != nil && f.Value.String() == "true"
}
