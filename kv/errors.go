package kv

import (
	"errors"
)

var (
	// ErrNotFound is returned when a job, checkpoint, claim or envelope
	// record does not exist.
	ErrNotFound = errors.New("kv: not found")
	// ErrJobExists is returned by Jobs.Create when the job id is taken.
	ErrJobExists = errors.New("kv: job exists")
	// ErrClaimHeld is returned by Claims.Acquire when another worker holds
	// an unexpired lease; the error is a *HeldError carrying the holder.
	ErrClaimHeld = errors.New("kv: claim held by a live worker")
	// ErrClaimLost is returned by Claims.Renew and Claims.Release when the
	// lease was stolen or released since the caller last wrote it.
	ErrClaimLost = errors.New("kv: claim lost")
	// ErrFenced is returned by a fenced checkpoint write when another
	// worker wrote the checkpoint since; the caller must stop without
	// acking.
	ErrFenced = errors.New("kv: fenced out by a newer checkpoint writer")
	// ErrFinished is returned by Checkpoints.Take when the chunk is already
	// done or cancelled: there is nothing left to run.
	ErrFinished = errors.New("kv: chunk already finished")
	// ErrJournalConflict is returned by Journal.Put when the row changed
	// since the writer last saw it: a journal row is never overwritten
	// blindly.
	ErrJournalConflict = errors.New("kv: journal row changed concurrently")
	// errContention is returned when a read-modify-write loop kept losing
	// its compare-and-swap and gave up.
	errContention = errors.New("kv: too much contention")
	// ErrNoChange is returned by a mutate function to leave the record as
	// it is; the store then writes nothing and reports no error.
	ErrNoChange = errors.New("kv: no change")
	// ErrGuardExists is returned by Envelopes.Guard when a chunk message
	// already has an envelope guard.
	ErrGuardExists = errors.New("kv: envelope guard exists")
	// ErrConflict is returned by a retention write when the record
	// changed since it was read: it is live again, and left as it is.
	ErrConflict = errors.New("kv: record changed since it was read")
	// ErrJobFinished is returned by Jobs.Cancel for a job that already
	// finished (done, partial, incomplete): nothing of it runs to cancel.
	ErrJobFinished = errors.New("kv: job already finished")
	// ErrBatchCut is the error of a batched direct get whose replies stopped
	// before the server's end-of-batch marker: the wait for them ran out (a
	// loaded machine, a slow link). What arrived is not the answer, and
	// nothing was handed on as if it were. streams.Retry asks again.
	ErrBatchCut = errors.New("kv: a batched read ended before the server said it was complete")
)

// HeldError says who holds a claim and until when.
type HeldError struct {
	Holder Lease
}

// Error names the holder and when its lease ends.
func (e *HeldError) Error() string {
	return "kv: claim " + e.Holder.Key + " held by " + e.Holder.ClaimedBy + " until " + e.Holder.ExpiresAt.Format("15:04:05.000")
}

// Is makes errors.Is(err, ErrClaimHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrClaimHeld }
