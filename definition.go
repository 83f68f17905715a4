package salvage

import (
	"context"
	"os"
	"slices"
	"strconv"

	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/recovery"
)

// Definition describes p as every process running its workers or
// recovery must agree on it, one line per fact: its stages and their
// agents, its tools and their effects, and its Version. Agents' code is
// not in it — say in Version when it changes in a way that matters. It
// returns an error for a pipeline that would not run (NewClient's).
func (p *Pipeline) Definition() ([]string, error) {
	plan, err := p.machinery(remote{})
	if err != nil {
		return nil, err
	}
	return plan.Definition(), nil
}

// Fingerprint is the hash of p's Definition, as "sha256:" and 16 hex
// digits: what salvage pipelines shows, Config.Upgrades and salvage up
// --upgrade name.
func (p *Pipeline) Fingerprint() (string, error) {
	def, err := p.Definition()
	if err != nil {
		return "", err
	}
	return recovery.Fingerprint(def), nil
}

// define registers the definition of every pipeline this client runs, or
// refuses to start when a pool runs another one (ErrDefinitionDiffers)
// and Config.Upgrades does not name this one: a pool runs one definition,
// so an impostor, a stale binary or a half-finished rollout cannot split
// or run its jobs.
func (c *Client) define(ctx context.Context, stores *kv.Stores) error {
	host, _ := os.Hostname()
	by := host + ":" + strconv.Itoa(os.Getpid())
	if c.cfg.WorkerID != "" {
		by = c.cfg.WorkerID
	}
	for _, name := range c.registry.Names() {
		plan, _ := c.registry.Get(name)
		def := plan.Definition()
		fp := recovery.Fingerprint(def)
		st, err := stores.Pipelines.Define(ctx, name, fp, def, recovery.DefinitionLinesMax, by, slices.Contains(c.cfg.Upgrades, fp))
		if err != nil {
			return err
		}
		if st.PreviousFingerprint != "" && st.Fingerprint == fp && st.DefinedBy == by {
			c.log.Warn().Str("pipeline", name).Str("fingerprint", fp).Str("previous", st.PreviousFingerprint).Msg("pipeline upgraded to this process's definition")
		}
	}
	return nil
}
