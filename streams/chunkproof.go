package streams

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/salvagehq/salvage/salvagetype"
)

// A job's chunks are bound to what its splitter split: the splitter builds
// a Merkle tree over the chunks (one leaf per chunk: its job, number,
// pipeline and input), records the root in the job record (chunks_root)
// and gives every chunk message the sibling hashes from its leaf to the
// root (proof). A worker checks a chunk against the root before it runs
// it, so a message whose input is not the one split for that chunk — a
// forged or edited chunk published by anyone allowed on salvage.chunks.> —
// changes nothing (invariant 11). A proof is ⌈log2 chunks⌉ hashes (at most
// 14 for 10,000 chunks, 600 bytes): the check is O(log n) per chunk and
// reads nothing but the job record the worker reads anyway.

// Domain prefixes keep a leaf from ever hashing like an inner node
// (RFC 6962's second-preimage guard).
const (
	leafPrefix = 0x00
	nodePrefix = 0x01
)

// chunkLeaf is the leaf hash of chunk (numbered from 1) of job: the job,
// chunk number, pipeline and the input in canonical form (see InputHash),
// so a replay that re-formats the JSON still matches.
func chunkLeaf(job string, chunk int, pipeline string, input json.RawMessage) [32]byte {
	h := sha256.New()
	h.Write([]byte{leafPrefix})
	h.Write([]byte("salvage.chunk.v1\x00"))
	h.Write([]byte(job))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(chunk)))
	h.Write([]byte{0})
	h.Write([]byte(pipeline))
	h.Write([]byte{0})
	h.Write(canonicalJSON(input))
	var out [32]byte
	h.Sum(out[:0])
	return out
}

func node(left, right [32]byte) [32]byte {
	var b [65]byte
	b[0] = nodePrefix
	copy(b[1:], left[:])
	copy(b[33:], right[:])
	return sha256.Sum256(b[:])
}

// ChunkTree is the Merkle tree of one job's chunks.
type ChunkTree struct {
	// levels[0] are the leaves; the last level holds the root. A level of
	// odd length promotes its last node to the next level unchanged.
	levels [][][32]byte
}

// NewChunkTree builds the tree of job's chunks of pipeline, inputs[i]
// being chunk i+1's input. It costs two hashes per chunk and keeps them
// (64 bytes a chunk) until the tree is dropped.
func NewChunkTree(job, pipeline string, inputs []json.RawMessage) *ChunkTree {
	leaves := make([][32]byte, len(inputs))
	for i, in := range inputs {
		leaves[i] = chunkLeaf(job, i+1, pipeline, in)
	}
	t := &ChunkTree{levels: [][][32]byte{leaves}}
	for level := leaves; len(level) > 1; {
		next := make([][32]byte, 0, (len(level)+1)/2)
		for i := 0; i < len(level); i += 2 {
			if i+1 < len(level) {
				next = append(next, node(level[i], level[i+1]))
			} else {
				next = append(next, level[i])
			}
		}
		t.levels = append(t.levels, next)
		level = next
	}
	return t
}

// Root is the tree's root as recorded in the job (hex); "" for no chunks.
func (t *ChunkTree) Root() string {
	top := t.levels[len(t.levels)-1]
	if len(top) == 0 {
		return ""
	}
	return hex.EncodeToString(top[0][:])
}

// Proof is chunk's proof (numbered from 1) as carried in its message: the
// sibling hashes from its leaf up, base64url without padding.
func (t *ChunkTree) Proof(chunk int) string {
	idx := chunk - 1
	var sibs []byte
	for _, level := range t.levels[:len(t.levels)-1] {
		switch {
		case idx%2 == 1:
			sibs = append(sibs, level[idx-1][:]...)
		case idx+1 < len(level):
			sibs = append(sibs, level[idx+1][:]...)
		}
		idx /= 2
	}
	return base64.RawURLEncoding.EncodeToString(sibs)
}

// VerifyChunk checks chunk c against root, the chunks_root of its job of
// n chunks. It returns nil when c's job, number, pipeline and input are
// what the job was split into, else an error wrapping ErrChunkProof. It
// reads nothing and costs ⌈log2 n⌉ hashes.
func VerifyChunk(root string, n int, c salvagetype.ChunkMsg) error {
	want, err := hex.DecodeString(root)
	if err != nil || len(want) != sha256.Size {
		return fmt.Errorf("%w: the job's chunks_root %q is not a sha256", ErrChunkProof, root)
	}
	if c.Chunk < 1 || c.Chunk > n {
		return fmt.Errorf("%w: chunk %d of a job of %d", ErrChunkProof, c.Chunk, n)
	}
	if c.Proof == "" && n > 1 {
		return fmt.Errorf("%w: chunk %d carries no proof", ErrChunkProof, c.Chunk)
	}
	sibs, err := base64.RawURLEncoding.DecodeString(c.Proof)
	if err != nil || len(sibs)%sha256.Size != 0 || len(sibs) > 64*sha256.Size {
		return fmt.Errorf("%w: chunk %d's proof cannot be read", ErrChunkProof, c.Chunk)
	}
	h := chunkLeaf(c.Job, c.Chunk, c.Pipeline, c.Input)
	idx, size := c.Chunk-1, n
	for size > 1 {
		var sib [32]byte
		switch {
		case idx%2 == 1 || idx+1 < size:
			if len(sibs) == 0 {
				return fmt.Errorf("%w: chunk %d's proof is too short", ErrChunkProof, c.Chunk)
			}
			copy(sib[:], sibs[:sha256.Size])
			sibs = sibs[sha256.Size:]
			if idx%2 == 1 {
				h = node(sib, h)
			} else {
				h = node(h, sib)
			}
		}
		idx, size = idx/2, (size+1)/2
	}
	if len(sibs) != 0 {
		return fmt.Errorf("%w: chunk %d's proof is too long", ErrChunkProof, c.Chunk)
	}
	if string(h[:]) != string(want) {
		return fmt.Errorf("%w: chunk %d of job %s (its input or pipeline differs from what was split)", ErrChunkProof, c.Chunk, c.Job)
	}
	return nil
}
