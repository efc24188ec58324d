package registry

import "github.com/agentd-dev/agentd/internal/llm"

// The built-in providers. Their names, base URLs and wire APIs are pi's, so
// a pi models.json that overrides "anthropic" or "openai" means the same
// thing here.
const (
	ProviderAnthropic = "anthropic"
	ProviderOpenAI    = "openai"

	anthropicBaseURL = "https://api.anthropic.com"
	openAIBaseURL    = "https://api.openai.com/v1"
)

// builtinProvider is what agentd knows about a provider without any
// configuration: where it lives, what it speaks and where its key is.
type builtinProvider struct {
	name    string
	api     llm.API
	baseURL string
	// keyEnv lists the environment variables that hold a key, highest
	// priority first; keyHint is the one to suggest to a user without one.
	keyEnv  []string
	keyHint string
}

// builtinProviders returns the built-in providers in catalog order.
func builtinProviders() []builtinProvider {
	return []builtinProvider{
		// pi prefers ANTHROPIC_OAUTH_TOKEN over ANTHROPIC_API_KEY; a token of
		// that kind is passed on as the key and the Anthropic provider
		// recognises it by its prefix.
		{ProviderAnthropic, llm.APIAnthropicMessages, anthropicBaseURL, []string{"ANTHROPIC_OAUTH_TOKEN", "ANTHROPIC_API_KEY"}, "ANTHROPIC_API_KEY"},
		{ProviderOpenAI, llm.APIOpenAIResponses, openAIBaseURL, []string{"OPENAI_API_KEY"}, "OPENAI_API_KEY"},
	}
}

func findBuiltinProvider(name string) (builtinProvider, bool) {
	for _, p := range builtinProviders() {
		if p.name == name {
			return p, true
		}
	}
	return builtinProvider{}, false
}

// wellKnownKeyEnv names the environment variable pi reads for an
// OpenAI-compatible provider it knows by name. agentd only consults it when
// the user has configured that provider in a models.json, because it has no
// built-in models for them.
func wellKnownKeyEnv(provider string) string {
	switch provider {
	case "google":
		return "GEMINI_API_KEY"
	case "groq":
		return "GROQ_API_KEY"
	case "cerebras":
		return "CEREBRAS_API_KEY"
	case "xai":
		return "XAI_API_KEY"
	case "openrouter":
		return "OPENROUTER_API_KEY"
	case "vercel-ai-gateway":
		return "AI_GATEWAY_API_KEY"
	case "zai":
		return "ZAI_API_KEY"
	case "mistral":
		return "MISTRAL_API_KEY"
	case "minimax":
		return "MINIMAX_API_KEY"
	case "minimax-cn":
		return "MINIMAX_CN_API_KEY"
	case "huggingface":
		return "HF_TOKEN"
	case "deepseek":
		return "DEEPSEEK_API_KEY"
	case "moonshot":
		return "MOONSHOT_API_KEY"
	case "opencode":
		return "OPENCODE_API_KEY"
	case "kimi-coding":
		return "KIMI_API_KEY"
	case "azure-openai-responses":
		return "AZURE_OPENAI_API_KEY"
	}
	return ""
}

// Catalog returns agentd's built-in models, a fresh copy on every call so
// callers may change what they get. Ids, prices (dollars per million
// tokens) and limits follow pi-ai's generated catalog; the compat flags
// record which models take the xhigh effort and Anthropic's adaptive
// thinking, which pi decides from the model id.
func Catalog() []llm.Model {
	textImage := func() []string { return []string{"text", "image"} }
	t := func() *bool { v := true; return &v }

	anthropic := func(id, name string, cost llm.ModelCost, ctx, maxOut int64, c *llm.Compat) llm.Model {
		return llm.Model{
			ID: id, Name: name, API: llm.APIAnthropicMessages, Provider: ProviderAnthropic,
			BaseURL: anthropicBaseURL, Reasoning: true, Input: textImage(), Cost: cost,
			ContextWindow: ctx, MaxTokens: maxOut, Compat: c,
		}
	}
	openai := func(id, name string, reasoning bool, in []string, cost llm.ModelCost, ctx, maxOut int64, c *llm.Compat) llm.Model {
		return llm.Model{
			ID: id, Name: name, API: llm.APIOpenAIResponses, Provider: ProviderOpenAI,
			BaseURL: openAIBaseURL, Reasoning: reasoning, Input: in, Cost: cost,
			ContextWindow: ctx, MaxTokens: maxOut, Compat: c,
		}
	}

	opus := llm.ModelCost{Input: 5, Output: 25, CacheRead: 0.5, CacheWrite: 6.25}
	sonnet := llm.ModelCost{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75}
	haiku := llm.ModelCost{Input: 1, Output: 5, CacheRead: 0.1, CacheWrite: 1.25}

	return []llm.Model{
		anthropic("claude-opus-4-7", "Claude Opus 4.7", opus, 1000000, 128000, &llm.Compat{SupportsXHigh: t(), AdaptiveThinking: t()}),
		anthropic("claude-opus-4-6", "Claude Opus 4.6", opus, 1000000, 128000, &llm.Compat{SupportsXHigh: t(), AdaptiveThinking: t()}),
		anthropic("claude-sonnet-4-6", "Claude Sonnet 4.6", sonnet, 1000000, 64000, &llm.Compat{AdaptiveThinking: t()}),
		anthropic("claude-opus-4-5", "Claude Opus 4.5", opus, 200000, 64000, nil),
		anthropic("claude-sonnet-4-5", "Claude Sonnet 4.5", sonnet, 200000, 64000, nil),
		anthropic("claude-haiku-4-5", "Claude Haiku 4.5", haiku, 200000, 64000, nil),

		openai("gpt-5.5", "GPT-5.5", true, textImage(), llm.ModelCost{Input: 5, Output: 30, CacheRead: 0.5}, 272000, 128000, &llm.Compat{SupportsXHigh: t()}),
		openai("gpt-5.4", "GPT-5.4", true, textImage(), llm.ModelCost{Input: 2.5, Output: 15, CacheRead: 0.25}, 272000, 128000, &llm.Compat{SupportsXHigh: t()}),
		openai("gpt-5.4-mini", "GPT-5.4 mini", true, textImage(), llm.ModelCost{Input: 0.75, Output: 4.5, CacheRead: 0.075}, 400000, 128000, &llm.Compat{SupportsXHigh: t()}),
		openai("gpt-5.4-nano", "GPT-5.4 nano", true, textImage(), llm.ModelCost{Input: 0.2, Output: 1.25, CacheRead: 0.02}, 400000, 128000, &llm.Compat{SupportsXHigh: t()}),
		openai("gpt-5.3-codex", "GPT-5.3 Codex", true, textImage(), llm.ModelCost{Input: 1.75, Output: 14, CacheRead: 0.175}, 400000, 128000, &llm.Compat{SupportsXHigh: t()}),
		openai("gpt-5.2", "GPT-5.2", true, textImage(), llm.ModelCost{Input: 1.75, Output: 14, CacheRead: 0.175}, 400000, 128000, &llm.Compat{SupportsXHigh: t()}),
		openai("gpt-5-mini", "GPT-5 Mini", true, textImage(), llm.ModelCost{Input: 0.25, Output: 2, CacheRead: 0.025}, 400000, 128000, nil),
		// The one non-reasoning model: a 1M window at low latency.
		openai("gpt-4.1", "GPT-4.1", false, textImage(), llm.ModelCost{Input: 2, Output: 8, CacheRead: 0.5}, 1047576, 32768, nil),
	}
}
