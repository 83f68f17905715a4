package salvage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/natsconf"
)

// A pipeline of one stage with one agent, run on an embedded server.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "salvage-example-")
	defer os.RemoveAll(dir)
	srv, err := natsconf.StartServer(natsconf.ServerConfig{StoreDir: dir, Listen: "127.0.0.1:-1"})
	if err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)

	greet := &salvage.Pipeline{
		Name:  "greet",
		Split: func(in json.RawMessage) ([]json.RawMessage, error) { return []json.RawMessage{in}, nil },
		Stages: []salvage.Stage{{Name: "hello", Agents: []salvage.Agent{{Name: "greeter",
			Run: func(ctx context.Context, t *salvage.Turn) (any, error) { return "hello " + string(t.Input), nil }}}}},
	}
	client, err := salvage.NewClient(js, &salvage.Config{Pipelines: []*salvage.Pipeline{greet}})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer client.Stop(ctx)
	id, err := client.JobSubmit(ctx, "greet", map[string]string{"name": "ada"}, nil)
	if err != nil {
		panic(err)
	}
	job, err := client.JobWait(ctx, id)
	if err != nil {
		panic(err)
	}
	fmt.Println(job.Status)
	results, _ := client.JobResults(ctx, id)
	fmt.Println(string(results[1]))
	// Output:
	// done
	// [{"stage":1,"agent":"greeter","output":"hello {\"name\":\"ada\"}"}]
}
