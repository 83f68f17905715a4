package salvage

import (
	"sync"
)

// submissionsMax bounds what a client remembers of its own submissions.
const submissionsMax = 4096

// submission is what a client knows of a job message it published: its
// SALVAGE_JOBS sequence and the hash of the input its id stands for, so
// JobWait and JobWaitAccepted tell its own rejection from an older one under
// the same id, and its own job from another's.
type submission struct {
	seq  uint64
	hash string
}

// submissions remembers the latest submissions of a client, at most
// submissionsMax, oldest forgotten first.
type submissions struct {
	mu    sync.Mutex
	byID  map[string]submission
	order []string
}

func (s *submissions) add(id string, sub submission) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID = map[string]submission{}
	}
	if _, ok := s.byID[id]; !ok {
		s.order = append(s.order, id)
		if len(s.order) > submissionsMax {
			delete(s.byID, s.order[0])
			s.order = s.order[1:]
		}
	}
	s.byID[id] = sub
}

func (s *submissions) get(id string) (submission, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.byID[id]
	return sub, ok
}
