// Mcp refunds orders through the tools of an MCP server, with Salvage
// between the agent and the server: every call journaled under an
// idempotency key, a refund whose answer was lost verified before it is
// made again, and a refund whose order then fails compensated with the
// server's cancel tool.
//
// The one binary is three programs:
//
//	mcp                       the demo: an embedded NATS server, the shop over stdio, six orders
//	mcp shop --ledger FILE [--http ADDR] [--hang-refund ORDER]
//	                          the MCP server (stdio, or streamable HTTP at http://ADDR/mcp)
//	mcp worker --nats URL (--mcp-url URL | --ledger FILE [--hang-refund ORDER]) [--ack-wait D] [--breaker-cool-down D]
//	                          a Salvage worker whose pipeline "refunds" calls the shop
//	                          (at a URL, or run as its child over stdio)
//
// mcp_test.go runs the worker and the shop as processes and kills each
// mid-job.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/mcptools"
	"github.com/salvagehq/salvage/natsconf"
)

func main() {
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "shop":
		err = serveShop(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "worker":
		err = runWorker(os.Args[2:])
	case len(os.Args) == 1:
		err = demo()
	default:
		err = fmt.Errorf("usage: %s [shop|worker] [flags]", os.Args[0])
	}
	if err != nil {
		log.Fatal(err)
	}
}

// refunds is the pipeline: each order is looked up, its address set, its
// refund issued and its customer told, each stage one MCP tool. The
// refund names its verify and compensation tools; the rest follow their
// annotations.
func refunds(ctx context.Context, shop *mcptools.Server) (*salvage.Pipeline, error) {
	tools, err := shop.Tools(ctx, mcptools.Options{Tools: map[string]mcptools.ToolOptions{
		"issue-refund": {Verify: "refund-status", Compensation: "cancel-refund"},
	}})
	if err != nil {
		return nil, err
	}
	stage := func(name, tool string) salvage.Stage {
		return salvage.Stage{Name: name, Agents: []salvage.Agent{{Name: name, Run: func(ctx context.Context, t *salvage.Turn) (any, error) {
			return t.Tool(ctx, tool, t.Input)
		}}}}
	}
	return &salvage.Pipeline{
		Name:  "refunds",
		Split: salvage.SplitItems,
		Stages: []salvage.Stage{
			stage("look-up", "lookup-order"), stage("address", "update-address"),
			stage("refund", "issue-refund"), stage("notify", "notify-customer"),
		},
		Tools: tools,
	}, nil
}

// dialShop reaches the shop at url, or runs this binary as the shop on
// stdio with its ledger at ledger.
func dialShop(ctx context.Context, url, ledger, hang string) (*mcptools.Server, error) {
	if url != "" {
		return mcptools.Dial(ctx, mcptools.StreamableHTTP(url, nil))
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"shop", "--ledger", ledger}
	if hang != "" {
		args = append(args, "--hang-refund", hang)
	}
	return mcptools.Dial(ctx, mcptools.Command(self, args...))
}

// runWorker runs Salvage's roles for the refunds pipeline until SIGTERM.
func runWorker(args []string) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	natsURL := fs.String("nats", "", "the NATS server (required)")
	url := fs.String("mcp-url", "", "the shop's streamable HTTP endpoint")
	ledger := fs.String("ledger", "", "without --mcp-url: run the shop on stdio with this ledger")
	hang := fs.String("hang-refund", "", "without --mcp-url: the shop's --hang-refund")
	ackWait := fs.Duration("ack-wait", 10*time.Second, "JetStream AckWait of the chunk pool")
	coolDown := fs.Duration("breaker-cool-down", salvage.BreakerCoolDownDefault, "how long the shop's circuit breaker stays open before a probe")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *natsURL == "" || (*url == "") == (*ledger == "") {
		return errors.New("worker: want --nats, and --mcp-url or --ledger")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	shop, err := dialShop(ctx, *url, *ledger, *hang)
	if err != nil {
		return err
	}
	defer shop.Close()
	p, err := refunds(ctx, shop)
	if err != nil {
		return err
	}
	nc, err := nats.Connect(*natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	client, err := salvage.NewClient(js, &salvage.Config{Pipelines: []*salvage.Pipeline{p}, AckWait: *ackWait,
		Concurrency: 2, RetryBase: 20 * time.Millisecond, Breaker: salvage.BreakerPolicy{CoolDown: *coolDown}})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	fmt.Println("worker: ready")
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return client.Stop(stopCtx)
}

// demo refunds six orders on an embedded server, the shop on stdio; the
// fifth has no e-mail, so its refund is cancelled.
func demo() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "mcp-example-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := natsconf.StartServer(natsconf.ServerConfig{StoreDir: dir, Listen: "127.0.0.1:-1"})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ledger := dir + "/ledger.jsonl"
	shop, err := dialShop(ctx, "", ledger, "")
	if err != nil {
		return err
	}
	defer shop.Close()
	p, err := refunds(ctx, shop)
	if err != nil {
		return err
	}
	client, err := salvage.NewClient(js, &salvage.Config{Pipelines: []*salvage.Pipeline{p}, RetryBase: 20 * time.Millisecond})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer client.Stop(context.Background())
	id, err := client.JobSubmit(ctx, "refunds", orders(1, 6), nil)
	if err != nil {
		return err
	}
	job, err := client.JobWait(ctx, id)
	if err != nil {
		return err
	}
	fmt.Printf("job %s: %d done, %d dead-lettered, %d prompt tokens reported by the shop\n",
		job.Status, job.Summary.Done, job.Summary.DeadLettered, job.Summary.PromptTokens)
	for {
		es, err := readLedger(ledger)
		if err != nil {
			return err
		}
		if n := count(es, "cancel", ""); n > 0 {
			fmt.Printf("shop: %d refunds, %d cancelled (order o-5 could not be told)\n", count(es, "refund", ""), n)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// orders is n orders numbered from first; every fifth (o-5, o-10, …)
// has no e-mail.
func orders(first, n int) []Order {
	out := make([]Order, n)
	for i := range out {
		k := first + i
		out[i] = Order{ID: fmt.Sprintf("o-%d", k), Cents: 100 * k, Email: fmt.Sprintf("c%d@example.com", k)}
		if k%5 == 0 {
			out[i].Email = ""
		}
	}
	return out
}

// count counts the entries of op, for order (any when empty).
func count(es []entry, op, order string) int {
	n := 0
	for _, e := range es {
		if e.Op == op && (order == "" || e.Order == order) {
			n++
		}
	}
	return n
}
