// Greet is the smallest Salvage program: one pipeline of one stage with
// one agent, run on an embedded NATS server. It prints "done".
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/natsconf"
)

func main() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "greet-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := natsconf.StartServer(natsconf.ServerConfig{StoreDir: dir, Listen: "127.0.0.1:-1"})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	greet := &salvage.Pipeline{
		Name:  "greet",
		Split: func(in json.RawMessage) ([]json.RawMessage, error) { return []json.RawMessage{in}, nil },
		Stages: []salvage.Stage{{Name: "hello", Agents: []salvage.Agent{{Name: "greeter",
			Run: func(ctx context.Context, t *salvage.Turn) (any, error) { return "hello " + string(t.Input), nil }}}}},
	}
	client, err := salvage.NewClient(js, &salvage.Config{Pipelines: []*salvage.Pipeline{greet}})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer client.Stop(ctx)
	id, err := client.JobSubmit(ctx, "greet", map[string]string{"name": "ada"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	job, err := client.JobWait(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.Status) // done
}
