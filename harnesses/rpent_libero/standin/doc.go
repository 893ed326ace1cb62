// Package standin replaces, in tests, what cannot run on a machine without a
// GPU, LIBERO or RPent: the `rpent` CLI and its RPC services (the LIBERO
// environment server, the Pi0.5 VLA server and the SAM3 server). They speak
// the same interfaces Roundhouse meets in production:
//
//   - cmd/rpent takes RPent's flags (an unknown flag is an error), plans as an
//     OpenAI Chat Completions client with tools against --base-url (any
//     server that answers with tool calls, e.g. harnesses/minimal's toy
//     model), maps every tool call onto a LIBERO-like step (SAM3 grounding,
//     VLA action chunk, environment step) and writes RPent's output files:
//     transcript_<tag>.json, states.json and run.log. Without
//     --env-endpoint/--vla-endpoint/--sam3-endpoint it spawns that service
//     itself, as RPent does, so its process group holds children. With
//     --policy-mode code the model writes snippets calling robo.<tool>()
//     instead of tool calls; each runs through the same steps within
//     --code-timeout-s and --code-max-calls and is recorded in code_policy/
//     (code.go).
//   - cmd/rpc-service is one of those services: it prints
//     "RPC server listening on http://HOST:PORT" when ready and answers
//     POST /call {"method": …} with {"ok": true, "result": …} or
//     {"ok": false, "error": …}; {"method":"healthz"} → {"ok":true,…}.
//
// The environment is seeded by (suite, task, seed) and alone decides success
// (states.json steps[*].terminated); the model's finish call is a claim.
// Knobs for failure tests (services that exit or never become ready, calls
// that fail, an rpent that hangs) and for reproducible episodes (a model
// sampling seed) are environment variables, so the command lines in
// standin.yaml stay those of the real harness.yaml.
//
// The RPC method names and payloads are the stand-in's own: RPent's exact
// wire protocol for /call beyond healthz is not documented upstream.
package standin
