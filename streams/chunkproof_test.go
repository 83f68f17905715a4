package streams_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// Every chunk of a job of 1 to 70 chunks verifies against the job's root
// with its own proof, its input re-formatted or not; a chunk that differs
// in anything the splitter bound (input, number, job, pipeline), or
// carries another chunk's proof, a cut or lengthened proof or none, does
// not.
func TestChunkProofs(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 70; n++ {
		inputs := make([]json.RawMessage, n)
		for i := range inputs {
			inputs[i] = json.RawMessage(fmt.Sprintf(`{"order": %d, "items": ["a", "b"]}`, i))
		}
		tree := streams.NewChunkTree("job1", "shop", inputs)
		root := tree.Root()
		for i := range inputs {
			c := salvagetype.ChunkMsg{Job: "job1", Chunk: i + 1, Pipeline: "shop", Input: inputs[i], Proof: tree.Proof(i + 1)}
			if err := streams.VerifyChunk(root, n, c); err != nil {
				t.Fatalf("n=%d chunk %d: %v", n, i+1, err)
			}
			compact := c
			compact.Input = json.RawMessage(fmt.Sprintf(`{"items":["a","b"],"order":%d}`, i))
			if err := streams.VerifyChunk(root, n, compact); err != nil {
				t.Fatalf("n=%d chunk %d re-formatted: %v", n, i+1, err)
			}
			bad := map[string]salvagetype.ChunkMsg{}
			m := c
			m.Input = json.RawMessage(`{"order": -1}`)
			bad["input"] = m
			m = c
			m.Job = "job2"
			bad["job"] = m
			m = c
			m.Pipeline = "other"
			bad["pipeline"] = m
			if n > 1 {
				m = c
				m.Chunk = i + 2 // the next chunk's number, or the one before the last
				if i+1 == n {
					m.Chunk = i
				}
				bad["number"] = m
				m = c
				m.Proof = ""
				bad["no proof"] = m
				m = c
				m.Proof = m.Proof[:len(m.Proof)-43]
				bad["short proof"] = m
			}
			m = c
			m.Proof += tree.Proof(1)[:min(43, len(tree.Proof(1)))] + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
			bad["long proof"] = m
			m = c
			m.Proof = "!!"
			bad["unreadable proof"] = m
			for what, m := range bad {
				if err := streams.VerifyChunk(root, n, m); !errors.Is(err, streams.ErrChunkProof) {
					t.Fatalf("n=%d chunk %d with another %s: %v", n, i+1, what, err)
				}
			}
		}
		if err := streams.VerifyChunk("not hex", n, salvagetype.ChunkMsg{Job: "job1", Chunk: 1, Pipeline: "shop", Input: inputs[0], Proof: tree.Proof(1)}); !errors.Is(err, streams.ErrChunkProof) {
			t.Fatalf("a root that is not a hash: %v", err)
		}
	}
}

// A proof is ⌈log2 n⌉ hashes: 14 for the largest job (10,000 chunks),
// 600 bytes in the message.
func TestChunkProofSize(t *testing.T) {
	t.Parallel()
	inputs := make([]json.RawMessage, 10_000)
	for i := range inputs {
		inputs[i] = json.RawMessage(`1`)
	}
	tree := streams.NewChunkTree("j", "p", inputs)
	for _, chunk := range []int{1, 5_000, 10_000} {
		if n := len(tree.Proof(chunk)); n > 600 {
			t.Errorf("chunk %d's proof is %d bytes", chunk, n)
		}
	}
}

// BenchmarkChunkTree builds the tree of a 10,000-chunk job (what a
// splitter does once per job) and verifies one chunk (what a worker does
// once per delivery).
func BenchmarkChunkTree(b *testing.B) {
	inputs := make([]json.RawMessage, 10_000)
	for i := range inputs {
		inputs[i] = json.RawMessage(fmt.Sprintf(`{"clause": %d, "text": "the supplier shall deliver the goods within thirty days of the order"}`, i))
	}
	b.Run("build-10000", func(b *testing.B) {
		for b.Loop() {
			streams.NewChunkTree("job", "contract-review", inputs)
		}
	})
	tree := streams.NewChunkTree("job", "contract-review", inputs)
	c := salvagetype.ChunkMsg{Job: "job", Chunk: 5_000, Pipeline: "contract-review", Input: inputs[4_999], Proof: tree.Proof(5_000)}
	root := tree.Root()
	b.Run("verify", func(b *testing.B) {
		for b.Loop() {
			if err := streams.VerifyChunk(root, len(inputs), c); err != nil {
				b.Fatal(err)
			}
		}
	})
}
