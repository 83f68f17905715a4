package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/salvagehq/salvage/cmd/salvage/internal/demo"
)

// The ramp part's shape: the order demo's outage scenario, the CRM down
// long enough for most orders to be held at it.
const (
	rampOrders  = 400
	rampWorkers = 2
	rampOutage  = 20 * time.Second
)

// rampRow is what the ramp part measured: how many orders the CRM's
// breaker held, and the CRM's requests in each second from the one it
// closed in.
type rampRow struct {
	Orders     int           `json:"orders"`
	Workers    int           `json:"workers"`
	Outage     time.Duration `json:"outage_ns"`
	Held       int           `json:"orders_held"`
	Resumed    int           `json:"orders_resumed"`
	AfterClose []int         `json:"requests_after_close"`
	Duplicates int           `json:"duplicate_side_effects"`
}

// peak is the most requests of any second after the close.
func (r rampRow) peak() int {
	if len(r.AfterClose) == 0 {
		return 0
	}
	return slices.Max(r.AfterClose)
}

// verdict: released at once, the held orders reach the CRM within a
// second or two (203 of 186 held in the first second, measured before
// the ramp); ramped, no second carries half of them.
func (r rampRow) verdict() string {
	return fmt.Sprintf("no second carries half the held: %s", verdict(r.Held > 0 && len(r.AfterClose) > 0 && r.peak() < r.Held/2 && r.Duplicates == 0))
}

// ramp runs `salvage demo --scenario outage` and reads its report.
func (b *bench) ramp(ctx context.Context) (rampRow, error) {
	row := rampRow{Orders: rampOrders, Workers: rampWorkers, Outage: rampOutage}
	exe, err := os.Executable()
	if err != nil {
		return row, err
	}
	cmd := exec.CommandContext(ctx, exe, "demo", "--pipeline", "order-fulfillment", "--scenario", "outage",
		"--outage-for", rampOutage.String(), "--orders", fmt.Sprint(rampOrders), "--workers", fmt.Sprint(rampWorkers),
		"--report", "json", "--log-level", "error")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil && len(out) == 0 {
		return row, fmt.Errorf("salvage demo: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var rep demo.OrdersReport
	if err := json.Unmarshal(out, &rep); err != nil {
		return row, fmt.Errorf("salvage demo's report: %w", err)
	}
	row.Held, row.Resumed, row.AfterClose, row.Duplicates = rep.OrdersHeld, rep.OrdersResumed, rep.AfterClose, rep.DuplicateSideEffects
	return row, nil
}
