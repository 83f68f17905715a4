package consumers

// SetAfterCreate installs a hook that runs right after the splitter creates
// a job record, so a test can crash the splitter there.
func SetAfterCreate(s *Splitter, f func()) { s.afterCreate = f }
