package consumers

// SetAfterPublish installs a hook that runs right after the splitter
// publishes a job's chunks and before it creates the record, so a test can
// crash the splitter there.
func SetAfterPublish(s *Splitter, f func()) { s.afterPublish = f }

// SetAfterDone installs a hook that runs right after a worker writes a
// chunk's done checkpoint, before it acks or counts it, so a test can kill
// the worker process there.
func SetAfterDone(w *Worker, f func()) { w.afterDone = f }
