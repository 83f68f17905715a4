package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/salvagehq/salvage"
)

// CallTimeoutDefault is how long a client waits for one sim request.
const CallTimeoutDefault = time.Second

// MaxAnswer is the most of one answer a client reads.
const MaxAnswer = 1 << 20

// ErrAnswerTooLarge is an answer longer than MaxAnswer (a ledger of many
// thousands of effects): refused whole, never decoded from its first
// MaxAnswer bytes.
var ErrAnswerTooLarge = errors.New("sim: answer larger than 1 MiB")

// Client calls a running sim. Failures come back as *salvage.CallError
// classified by HTTP status, never by message text.
type Client struct {
	// BaseURL is the sim's http://host:port.
	BaseURL string
	// Timeout bounds one request. Default CallTimeoutDefault.
	Timeout time.Duration
	// HTTP is the transport. Default http.DefaultClient.
	HTTP *http.Client
}

// Effect applies system's effect under key (POST /v1/<system>/<op>).
func (c *Client) Effect(ctx context.Context, system, op, key string, body any) (EffectResponse, error) {
	var out EffectResponse
	err := c.do(ctx, http.MethodPost, "/v1/"+system+"/"+op, key, body, &out)
	return out, err
}

// Verify asks whether an effect with key took place.
func (c *Client) Verify(ctx context.Context, system, key string) (EffectResponse, error) {
	var out EffectResponse
	err := c.do(ctx, http.MethodGet, "/v1/"+system+"/effects/"+key, "", nil, &out)
	return out, err
}

// Customer reads a customer's profile from system (a read: no effect).
func (c *Client) Customer(ctx context.Context, system, id string) (Profile, error) {
	var out Profile
	err := c.do(ctx, http.MethodGet, "/v1/"+system+"/customers/"+url.PathEscape(id), "", nil, &out)
	return out, err
}

// Compensate undoes the effect made under origKey, itself idempotent
// under compensationKey.
func (c *Client) Compensate(ctx context.Context, system, undo, compensationKey, origKey string) (EffectResponse, error) {
	var out EffectResponse
	err := c.do(ctx, http.MethodPost, "/v1/"+system+"/"+undo, compensationKey, CompensateRequest{Key: origKey}, &out)
	return out, err
}

// Ledger returns every effect the sim has seen.
func (c *Client) Ledger(ctx context.Context) (Ledger, error) {
	var out Ledger
	err := c.do(ctx, http.MethodGet, "/ledger", "", nil, &out)
	return out, err
}

// LedgerSummary returns the ledger's counts alone: a bounded answer where
// Ledger's grows with every effect (past MaxAnswer at ~1,500).
func (c *Client) LedgerSummary(ctx context.Context) (Summary, error) {
	var out Summary
	err := c.do(ctx, http.MethodGet, "/ledger/summary", "", nil, &out)
	return out, err
}

// Requests returns how many requests each system got.
func (c *Client) Requests(ctx context.Context) (map[string]Requests, error) {
	var out map[string]Requests
	err := c.do(ctx, http.MethodGet, "/admin/requests", "", nil, &out)
	return out, err
}

// Quota returns what each model's quota admitted and refused.
func (c *Client) Quota(ctx context.Context) (map[string]QuotaUse, error) {
	var out map[string]QuotaUse
	err := c.do(ctx, http.MethodGet, "/admin/quota", "", nil, &out)
	return out, err
}

// SetFaults replaces the sim's fault configuration.
func (c *Client) SetFaults(ctx context.Context, cfg Config) error {
	return c.do(ctx, http.MethodPost, "/admin/faults", "", cfg, nil)
}

// StopRules stops the fault rules of system for order (POST
// /admin/faults/stop); the other rules keep firing, their counts kept.
func (c *Client) StopRules(ctx context.Context, system, order string) error {
	return c.do(ctx, http.MethodPost, "/admin/faults/stop", "", Rule{System: system, Order: order}, nil)
}

func (c *Client) do(ctx context.Context, method, path, key string, body, out any) error {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = CallTimeoutDefault
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return salvage.Permanent(0, err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, rd)
	if err != nil {
		return salvage.Permanent(0, err)
	}
	if key != "" {
		req.Header.Set(HeaderIdempotencyKey, key)
	}
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return salvage.Timeout(fmt.Errorf("%s %s: no answer in %s", method, path, timeout))
		}
		if errors.Is(err, context.Canceled) {
			return err
		}
		return salvage.Transient(0, fmt.Errorf("%s %s: %w", method, path, err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer+1))
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return salvage.Timeout(fmt.Errorf("%s %s: no answer in %s", method, path, timeout))
		}
		return salvage.Transient(resp.StatusCode, err)
	}
	if len(data) > MaxAnswer {
		return salvage.Permanent(resp.StatusCode, fmt.Errorf("%s %s: %w", method, path, ErrAnswerTooLarge))
	}
	if resp.StatusCode != http.StatusOK {
		return statusError(resp, method, path, data)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return salvage.Permanent(resp.StatusCode, fmt.Errorf("%s %s: bad answer: %w", method, path, err))
	}
	return nil
}

// statusError classifies a non-200 answer by its status code.
func statusError(resp *http.Response, method, path string, data []byte) error {
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(data, &e)
	err := fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, e.Error)
	switch code := resp.StatusCode; {
	case code == http.StatusTooManyRequests:
		after := time.Second
		if ms, perr := strconv.Atoi(resp.Header.Get(HeaderRetryAfterMS)); perr == nil {
			after = time.Duration(ms) * time.Millisecond
		} else if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil {
			after = time.Duration(s) * time.Second
		}
		return salvage.RateLimited(after, err)
	case code == http.StatusGatewayTimeout || code == http.StatusRequestTimeout:
		return salvage.Timeout(err)
	case code >= 500:
		return salvage.Transient(code, err)
	default:
		return salvage.Permanent(code, err)
	}
}
