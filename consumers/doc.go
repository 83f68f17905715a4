// Package consumers holds everything that consumes a Salvage stream: the
// splitter, the chunk worker, the dead-letterer and the sweeper. It is the
// only package that decides ack, nak, term and in-progress.
package consumers
