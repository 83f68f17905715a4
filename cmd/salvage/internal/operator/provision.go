package operator

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
)

// provisionCmd is `salvage provision`: the administrator's step.
func (e *Env) provisionCmd() *cobra.Command {
	var run RunFlags
	cmd := &cobra.Command{
		Use:   "provision",
		Short: "Create or update the streams, buckets and consumers (run with an administrator's user)",
		Long: `Create or update, on the deployment named by --server, $NATS_URL or --context, the streams,
buckets and consumers that salvage up with the same --pipelines, --replicas, --ack-wait and
--max-deliver needs, register its pipelines (their jobs wait for workers), and exit. Run it
with a user that may change JetStream configuration (natsconf/accounts.conf: admin); workers,
submitters and operators then run with users that may not: salvage up finds everything as it
would configure it and only reads. Run it again after upgrading Salvage or adding a pipeline;
a process that finds something missing or configured otherwise says so and names this command.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := e.Logger()
			if err != nil {
				return err
			}
			run.ResolveJournal(false, 0) // journal rows are not written here
			// Provisioning calls no tool: MCP tools are declared only.
			cfg, err := run.Config(nil, nil, log)
			if err != nil {
				return err
			}
			nc, js, err := e.Connect("salvage provision")
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			ctx = e.refused.watch(ctx)
			client, err := salvage.NewClient(js, cfg)
			if err != nil {
				return err
			}
			if err := client.Provision(ctx); err != nil {
				return e.explain(err)
			}
			names := make([]string, 0, len(cfg.Pipelines))
			for _, p := range cfg.Pipelines {
				names = append(names, p.Name)
			}
			fmt.Fprintf(e.Stdout, "provisioned streams, buckets and the pools of %s on %s\n", strings.Join(names, ", "), nc.ConnectedUrlRedacted())
			return nil
		},
	}
	// The settings that shape streams and consumers, with up's defaults.
	all := pflag.NewFlagSet("run", pflag.ContinueOnError)
	run.Register(all, simmodel.Config{Seed: 1, Latency: 20 * time.Millisecond})
	for _, name := range []string{"pipelines", "demo-pipelines", "replicas", "partitions", "ack-wait", "max-deliver"} {
		cmd.Flags().AddFlag(all.Lookup(name))
	}
	return cmd
}
