package dashboard_test

import (
	"testing"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/dashboard"
)

// Failing lists the chunks that need a person or are not finished, most
// urgent first; a done chunk is never among them, whatever it went
// through (it listed every chunk that ever met an open breaker).
func TestFailingListsOnlyWhatNeedsSomeone(t *testing.T) {
	t.Parallel()
	chunks := []salvage.Chunk{
		{Chunk: 1, Status: salvage.ChunkDone, LastError: "breaker open", Holds: 2},
		{Chunk: 2, Status: salvage.ChunkDone, Envelope: "E-resolved"},
		{Chunk: 3, Status: salvage.ChunkRunning, LastError: "503"},
		{Chunk: 4, Status: salvage.ChunkHeld},
		{Chunk: 5, Status: salvage.ChunkDeadLettered, Envelope: "E5"},
		{Chunk: 6, Status: "cancelled-at-stage-2", Envelope: "E6"},
		{Chunk: 7, Status: "cancelled-at-stage-0"},
		{Chunk: 8, Status: salvage.ChunkPending},
	}
	var got []int
	for _, c := range dashboard.Failing(chunks) {
		got = append(got, c.Chunk)
	}
	want := []int{5, 4, 6, 3}
	if len(got) != len(want) {
		t.Fatalf("failing %v; want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("failing %v; want %v", got, want)
		}
	}
}
