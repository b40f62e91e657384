// The E2B SDK's part of `tupper bench --api`: the exec round trip of E2B's JS SDK,
// unmodified, against tupper serve. Each project directory runs it through its bench.mjs with
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set (the bench does that against a server it
// starts). It makes one sandbox without internet access, times n sbx.commands.run('true')
// after one warm-up, kills the sandbox and prints one JSON line: {"sdk": VERSION, "ms": [...]}.
// It measures; it asserts nothing about the times.
export async function bench(sdk, sdkVersion, n) {
  for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
    if (!process.env[v]) throw new Error(`${v} is not set`)
  }
  const sbx = await sdk.Sandbox.create('base', { allowInternetAccess: false, timeoutMs: 600_000 })
  try {
    const ms = []
    for (let i = 0; i <= n; i++) {
      const t0 = performance.now()
      const r = await sbx.commands.run('true')
      const t = performance.now() - t0
      if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`)
      if (i > 0) ms.push(t)
    }
    console.log(JSON.stringify({ sdk: sdkVersion, ms }))
  } finally {
    await sbx.kill()
  }
}
