package cli_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/salvagehq/salvage"
	"github.com/salvagehq/salvage/cmd/salvage/internal/contractreview"
	"github.com/salvagehq/salvage/cmd/salvage/internal/demo"
	"github.com/salvagehq/salvage/cmd/salvage/internal/operator"
	"github.com/salvagehq/salvage/cmd/salvage/internal/sim"
	"github.com/salvagehq/salvage/cmd/salvage/internal/simmodel"
	"github.com/salvagehq/salvage/kv"
	"github.com/salvagehq/salvage/salvagetest"
)

// TestLimitsFromTheCLI: `salvage limits set` declares a limit through the
// salvage.api service, `salvage limits` lists it with who set it, a key
// that is not <kind>.<name> and a limit of no bound are refused with what
// is wrong, removing an undeclared key says so, and `salvage limits rm`
// removes it.
func TestLimitsFromTheCLI(t *testing.T) {
	t.Parallel()
	url, _ := up(t, "--role", "api")
	if code, out, errOut := run(t, "", "limits", "set", "system.crm", "--rpm", "60", "--in-flight", "4", "--by", "ann", "--server", url); code != operator.ExitOK ||
		!strings.Contains(out, "limit system.crm set by ann") {
		t.Fatalf("limits set exit %d: %s%s", code, out, errOut)
	}
	code, out, errOut := run(t, "", "limits", "--json", "--server", url)
	var ls []salvage.LimitState
	if code != operator.ExitOK || jsonItems(out, &ls) != nil || len(ls) != 1 {
		t.Fatalf("limits --json exit %d: %s%s", code, out, errOut)
	}
	if l := ls[0]; l.Key != "system.crm" || l.RequestsPerMinute != 60 || l.InFlight != 4 || l.TokensPerMinute != 0 || l.SetBy != "ann" || l.Holders != 0 {
		t.Errorf("listed %+v; want system.crm at 60 requests a minute and 4 in flight, set by ann, held by nobody", l)
	}
	if code, out, _ := run(t, "", "limits", "--server", url); code != operator.ExitOK || !strings.Contains(out, "system.crm") {
		t.Errorf("limits exit %d: %s", code, out)
	}
	for _, bad := range [][]string{{"system.a.b", "--rpm", "1"}, {"crm", "--rpm", "1"}, {"system.crm"}} {
		if code, _, errOut := run(t, "", append(append([]string{"limits", "set"}, bad...), "--server", url)...); code == operator.ExitOK || !strings.Contains(errOut, "invalid limit") {
			t.Errorf("limits set %v: exit %d, %s; want refused as an invalid limit", bad, code, errOut)
		}
	}
	if code, _, errOut := run(t, "", "limits", "rm", "system.nobody", "--server", url); code == operator.ExitOK || !strings.Contains(errOut, "no limit is declared") {
		t.Errorf("limits rm of an undeclared key: exit %d, %s", code, errOut)
	}
	if code, out, errOut := run(t, "", "limits", "rm", "system.crm", "--server", url); code != operator.ExitOK || !strings.Contains(out, "limit system.crm removed") {
		t.Fatalf("limits rm exit %d: %s%s", code, out, errOut)
	}
	if code, out, _ := run(t, "", "limits", "--json", "--server", url); code != operator.ExitOK || jsonItems(out, &ls) != nil || len(ls) != 0 {
		t.Errorf("limits after the rm: exit %d, %s; want []", code, out)
	}
}

// TestKilledWorkersShareReturnsWithinALease: two worker processes of two
// slots each, a job of four chunks, share a limit of 1,200 requests a
// minute on the sim's model, whose quota is the same. One is SIGKILLed while it holds its share: the record lets its
// share go within one lease (3 s) of the kill, and the survivor then
// holds the whole limit; the job finishes; the
// sim refused nothing and counted no minute past the quota.
func TestKilledWorkersShareReturnsWithinALease(t *testing.T) {
	t.Parallel()
	const rpm = 1200
	simCmd := exec.Command(binary, "sim", "--listen", "127.0.0.1:0", "--model-latency", "1ms", "--model-rpm", "1200")
	demo.DieWithParent(simCmd)
	s := &sim.Client{BaseURL: startPrinting(t, simCmd, "SIM_URL="), Timeout: 5 * time.Second}
	url, _ := up(t, append([]string{"--role", "dead-letter,api", "--sim", s.BaseURL}, fastTiers...)...)
	key := "system.model-127_0_0_1"
	if code, out, errOut := run(t, "", "limits", "set", key, "--rpm", "1200", "--server", url); code != operator.ExitOK {
		t.Fatalf("limits set exit %d: %s%s", code, out, errOut)
	}
	worker := func() *exec.Cmd {
		_, cmd := up(t, append([]string{"--server", url, "--role", "worker", "--sim", s.BaseURL, "--concurrency", "2"}, fastTiers...)...)
		return cmd
	}
	worker()
	victim := worker()
	contract := writeFile(t, "contract.txt", contractreview.Contract(4, 0))
	code, out, errOut := run(t, "", "submit", "contract-review", contract, "--server", url)
	if code != operator.ExitOK {
		t.Fatalf("submit exit %d: %s", code, errOut)
	}
	job := strings.TrimSpace(out)
	limit := func() salvage.LimitState {
		code, out, _ := run(t, "", "limits", "--json", "--server", url)
		var ls []salvage.LimitState
		if code != operator.ExitOK || jsonItems(out, &ls) != nil || len(ls) != 1 {
			return salvage.LimitState{}
		}
		return ls[0]
	}
	salvagetest.Eventually(t, time.Minute, func() bool { return limit().Holders == 2 }, "both workers holding a share of %s", key)
	js, err := jetstream.New(salvagetest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	stores, err := kv.Open(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	if err := victim.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// The dead process's share is free when its lease ends, as the
	// record says: no entry written before the kill runs past one lease
	// from it, whatever the machine's speed.
	sh, _, err := stores.Limits.Shares(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	for id, s := range sh.Shares {
		if s.Expires.After(killed.Add(3 * time.Second)) {
			t.Errorf("%s's share expires %s after the kill; want within one lease (3 s)", id, s.Expires.Sub(killed))
		}
	}
	var back time.Duration
	salvagetest.Eventually(t, time.Minute, func() bool {
		l := limit()
		back = time.Since(killed)
		return l.Holders == 1 && l.HeldRequestsPerMinute >= 0.95*rpm
	}, "the survivor holding the whole limit")
	t.Logf("the killed worker's share back in the survivor's %s after the SIGKILL", back.Round(10*time.Millisecond))
	salvagetest.Eventually(t, 2*time.Minute, func() bool {
		code, out, _ := run(t, "", "status", job, "--server", url)
		return code == operator.ExitOK && strings.Contains(out, "status done")
	}, "job %s done", job)
	use, err := s.Quota(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	u := use[simmodel.ModelName]
	if most, _ := u.MaxMinute(); u.Refused != 0 || most > rpm*105/100 || u.Admitted < 4*contractreview.CallsPerChunk {
		t.Errorf("the sim's quota: %d admitted, %d refused, at most %d in a minute; want the job's calls, none refused, at most 5%% past %d", u.Admitted, u.Refused, most, rpm)
	}
}
