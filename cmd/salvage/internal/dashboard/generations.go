package dashboard

import (
	"sync"
	"time"
)

// generations is what an index kept by a restartable watch knows of the
// watch. A watch that (re)starts delivers every record that exists, then
// the caught-up mark; a removal comes only as a delete marker, which the
// buckets keep 10 s. So each record is stamped with the generation that
// last delivered it, and at a caught-up mark after the first, a record of
// the old generation was removed while the watch was down: stale.
type generations struct {
	gen, caughtUp bool
	ready         chan struct{}
	once          sync.Once
}

func newGenerations() generations { return generations{ready: make(chan struct{})} }

// current is the generation to stamp a delivered record with.
func (g *generations) current() bool { return g.gen }

// stale reports whether a record stamped gen is gone, at a caught-up mark
// (before end).
func (g *generations) stale(gen bool) bool { return g.caughtUp && gen != g.gen }

// end closes a generation at a caught-up mark, once its stale records
// are swept.
func (g *generations) end() {
	g.caughtUp, g.gen = true, !g.gen
	g.once.Do(func() { close(g.ready) })
}

// wait blocks until the watch has caught up once, or a short while, so a
// summary never hangs.
func (g *generations) wait() {
	select {
	case <-g.ready:
	case <-time.After(2 * time.Second):
	}
}
