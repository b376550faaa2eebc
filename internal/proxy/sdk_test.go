package proxy

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	openaiopt "github.com/openai/openai-go/v3/option"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// These tests drive the gateway with the official Go SDKs of Anthropic
// and OpenAI, against a local upstream that answers as their APIs do:
// what the SDK sees of a budget by model and in money, of a refusal, and
// of an estimate that cannot fit.

// sdkRules are budgets in money per model, refused in the provider's
// shape.
const sdkRules = `
configs:
  - appId: app-1
    limits:
      - api: /v1/messages
        limit: 100000
        unit: 1h
        algorithm: fixed_window
        by: body:model
        errorFormat: anthropic
        cost:
          price:
            claude-sonnet-4-5: {input: 3, output: 15}
            claude-haiku-4-5: {input: 1, output: 5}
          reserve: estimate
      - api: /v1/chat/completions
        limit: 100000
        unit: 1h
        algorithm: fixed_window
        by: body:model
        errorFormat: openai
        cost:
          price:
            gpt-4o: {input: 2.50, output: 10}
            gpt-4o-mini: {input: 0.15, output: 0.60}
          reserve: estimate
`

// tokens asks the upstream to report in and out tokens.
func tokens(in, out int) (string, string) { return strconv.Itoa(in), strconv.Itoa(out) }

func TestAnthropicSDK(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, store string, _ *redistest.Server) {
		g := newPricedGWWith(t, store, sdkRules)
		client := anthropic.NewClient(anthropicopt.WithoutEnvironmentDefaults(), anthropicopt.WithBaseURL(g.srv.URL), anthropicopt.WithAPIKey("test"),
			anthropicopt.WithMaxRetries(0), anthropicopt.WithHeader("X-App-Id", "app-1"), anthropicopt.WithRequestTimeout(time.Minute))
		ctx := context.Background()
		params := func(model anthropic.Model, maxTokens int64) anthropic.MessageNewParams {
			return anthropic.MessageNewParams{Model: model, MaxTokens: maxTokens,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello"))}}
		}
		report := func(in, out int) []anthropicopt.RequestOption {
			i, o := tokens(in, out)
			return []anthropicopt.RequestOption{anthropicopt.WithHeader("X-Test-In", i), anthropicopt.WithHeader("X-Test-Out", o)}
		}
		charged := func(what string, want int64) {
			t.Helper()
			if got := limitsOf(g.obs.last())[0].Charged; got != want {
				t.Errorf("%s: charged %d µ$, want %d", what, got, want)
			}
		}

		// JSON: 1000 × $3 + 200 × $15 per million = 6000 µ$.
		msg, err := client.Messages.New(ctx, params("claude-sonnet-4-5", 1000), report(1000, 200)...)
		if err != nil {
			t.Fatal(err)
		}
		if msg.Usage.InputTokens != 1000 || msg.Usage.OutputTokens != 200 || msg.Content[0].Text != "Hi" {
			t.Errorf("message: usage %+v, content %+v", msg.Usage, msg.Content)
		}
		charged("json", 6000)

		// A stream, as the SDK accumulates it: the same price.
		stream := client.Messages.NewStreaming(ctx, params("claude-sonnet-4-5", 1000), report(1000, 200)...)
		var acc anthropic.Message
		for stream.Next() {
			if err := acc.Accumulate(stream.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if acc.Usage.InputTokens != 1000 || acc.Usage.OutputTokens != 200 || len(acc.Content) != 1 || acc.Content[0].Text != "Hi" {
			t.Errorf("stream: usage %+v, content %+v", acc.Usage, acc.Content)
		}
		charged("stream", 6000)

		// Each model has its own budget: haiku's is whole.
		var resp *http.Response
		if _, err := client.Messages.New(ctx, params("claude-haiku-4-5", 100), append(report(10, 10), anthropicopt.WithResponseInto(&resp))...); err != nil {
			t.Fatal(err)
		}
		// Less only its own estimate (1000 µ$ at most), not sonnet's spend.
		if got, _ := strconv.Atoi(resp.Header.Get("X-RateLimit-Remaining")); got < 99000 || got >= 100000 {
			t.Errorf("haiku's budget at admission: remaining %d, want its own budget less its estimate", got)
		}
		charged("haiku", 60) // 10 × 1 + 10 × 5

		// Sonnet spends past its budget: 4000 × 3 + 5500 × 15 = 94500
		// µ$, more than the 88000 left, charged as reported.
		if _, err := client.Messages.New(ctx, params("claude-sonnet-4-5", 100), report(4000, 5500)...); err != nil {
			t.Fatal(err)
		}
		charged("over", 94500)
		hits := g.up.hits.Load()
		_, err = client.Messages.New(ctx, params("claude-sonnet-4-5", 10), report(1, 1)...)
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Type() != "rate_limit_error" {
			t.Fatalf("sonnet over budget: got %v, want the SDK's 429 rate_limit_error", err)
		}
		// Haiku has 99940 µ$ left; 30000 output tokens at $5 per million
		// are an estimate of 150000 (capped at the limit), which cannot
		// fit: refused before the upstream sees it.
		_, err = client.Messages.New(ctx, params("claude-haiku-4-5", 30000), report(1, 1)...)
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Type() != "rate_limit_error" {
			t.Fatalf("haiku's estimate: got %v, want the SDK's 429 rate_limit_error", err)
		}
		if n := g.up.hits.Load(); n != hits {
			t.Errorf("the upstream saw %d refused requests", n-hits)
		}
		// A small one still fits.
		if _, err := client.Messages.New(ctx, params("claude-haiku-4-5", 100), report(10, 10)...); err != nil {
			t.Errorf("haiku, small: %v", err)
		}
		if got := metric(g.metrics, "gateway_spend_micros_total", "app", "app-1"); got != 6000+6000+60+94500+60 {
			t.Errorf("gateway_spend_micros_total: got %v, want %d", got, 6000+6000+60+94500+60)
		}
	})
}

func TestOpenAISDK(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, store string, _ *redistest.Server) {
		g := newPricedGWWith(t, store, sdkRules)
		client := openai.NewClient(openaiopt.WithBaseURL(g.srv.URL+"/v1/"), openaiopt.WithAPIKey("test"), openaiopt.WithMaxRetries(0),
			openaiopt.WithHeader("X-App-Id", "app-1"), openaiopt.WithRequestTimeout(time.Minute))
		ctx := context.Background()
		params := func(model string, maxTokens int64) openai.ChatCompletionNewParams {
			return openai.ChatCompletionNewParams{Model: model, MaxCompletionTokens: openai.Int(maxTokens),
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")}}
		}
		report := func(in, out int) []openaiopt.RequestOption {
			i, o := tokens(in, out)
			return []openaiopt.RequestOption{openaiopt.WithHeader("X-Test-In", i), openaiopt.WithHeader("X-Test-Out", o)}
		}
		charged := func(what string, want int64) {
			t.Helper()
			if got := limitsOf(g.obs.last())[0].Charged; got != want {
				t.Errorf("%s: charged %d µ$, want %d", what, got, want)
			}
		}

		// JSON: 1000 × $2.50 + 500 × $10 per million = 7500 µ$.
		cc, err := client.Chat.Completions.New(ctx, params("gpt-4o", 1000), report(1000, 500)...)
		if err != nil {
			t.Fatal(err)
		}
		if cc.Usage.PromptTokens != 1000 || cc.Usage.CompletionTokens != 500 || cc.Choices[0].Message.Content != "Hi" {
			t.Errorf("completion: usage %+v, choices %+v", cc.Usage, cc.Choices)
		}
		charged("json", 7500)

		// A stream that asks for its usage, as the SDK accumulates it.
		p := params("gpt-4o", 1000)
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := client.Chat.Completions.NewStreaming(ctx, p, report(1000, 500)...)
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if acc.Usage.PromptTokens != 1000 || acc.Usage.CompletionTokens != 500 || len(acc.Choices) != 1 || acc.Choices[0].Message.Content != "Hi" {
			t.Errorf("stream: usage %+v, choices %+v", acc.Usage, acc.Choices)
		}
		charged("stream", 7500)

		// gpt-4o-mini's budget is its own: 9 × 0.15 + 12 × 0.60 = 8.55, rounded up.
		var resp *http.Response
		if _, err := client.Chat.Completions.New(ctx, params("gpt-4o-mini", 100), append(report(9, 12), openaiopt.WithResponseInto(&resp))...); err != nil {
			t.Fatal(err)
		}
		// Less only its own estimate (100 µ$ at most), not gpt-4o's spend.
		if got, _ := strconv.Atoi(resp.Header.Get("X-RateLimit-Remaining")); got < 99900 || got >= 100000 {
			t.Errorf("gpt-4o-mini's budget at admission: remaining %d, want its own budget less its estimate", got)
		}
		charged("mini", 9)

		// gpt-4o spends past the 85000 left: 10000 × 2.50 + 7000 × 10 = 95000.
		if _, err := client.Chat.Completions.New(ctx, params("gpt-4o", 100), report(10000, 7000)...); err != nil {
			t.Fatal(err)
		}
		charged("over", 95000)
		hits := g.up.hits.Load()
		_, err = client.Chat.Completions.New(ctx, params("gpt-4o", 10), report(1, 1)...)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "rate_limit_exceeded" || apiErr.Type != "tokens" {
			t.Fatalf("gpt-4o over budget: got %v, want the SDK's 429 rate_limit_exceeded of type tokens", err)
		}
		// gpt-4o-mini: 200000 output tokens at $0.60 per million are an
		// estimate of 120000, capped at the limit, which cannot fit.
		_, err = client.Chat.Completions.New(ctx, params("gpt-4o-mini", 200000), report(1, 1)...)
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "rate_limit_exceeded" {
			t.Fatalf("gpt-4o-mini's estimate: got %v, want the SDK's 429 rate_limit_exceeded", err)
		}
		if n := g.up.hits.Load(); n != hits {
			t.Errorf("the upstream saw %d refused requests", n-hits)
		}
	})
}
