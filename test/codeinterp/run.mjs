// E2B's Code Interpreter SDK (npm @e2b/code-interpreter 2.8.0), unmodified, against tupper
// serve: E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY name the server (test/codeinterp's Go
// test sets them). Every step throws on a wrong answer; the figures are printed as
// "figure: ..." lines.
import { Sandbox } from '@e2b/code-interpreter'
import assert from 'node:assert/strict'

const steps = []
async function step(name, fn) {
  const t0 = performance.now()
  try {
    await fn()
  } catch (e) {
    console.error(`FAIL ${name}: ${e?.stack ?? e}`)
    process.exitCode = 1
    return
  }
  steps.push(name)
  console.log(`ok   ${name} (${Math.round(performance.now() - t0)} ms)`)
}

const ms = (t) => `${t.toFixed(1)} ms`
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]

let t0 = performance.now()
const sbx = await Sandbox.create({ timeoutMs: 10 * 60 * 1000 })
const created = performance.now() - t0
t0 = performance.now()
const first = await sbx.runCode('1+1')
const firstCell = performance.now() - t0
console.log(`figure: Sandbox.create() ${ms(created)}, then the first runCode('1+1') ${ms(firstCell)}`)

await step('the first cell is 2', async () => {
  assert.equal(first.text, '2')
  assert.equal(first.error, undefined)
})

await step('variables live between cells', async () => {
  await sbx.runCode('x = 40')
  const e = await sbx.runCode('x + 2')
  assert.equal(e.text, '42')
  assert.ok(e.executionCount > 1, `executionCount ${e.executionCount}`)
})

await step('callbacks stream stdout, stderr, results and the error', async () => {
  const seen = { stdout: [], stderr: [], results: [], errors: [] }
  const e = await sbx.runCode(
    'import sys\nprint("out")\nprint("err", file=sys.stderr)\ndisplay({"a": 1}, raw=False)\nraise ValueError("bad value")',
    {
      onStdout: (m) => seen.stdout.push(m.line),
      onStderr: (m) => seen.stderr.push(m.line),
      onResult: (r) => seen.results.push(r),
      onError: (err) => seen.errors.push(err),
    },
  )
  assert.deepEqual(seen.stdout, ['out\n'])
  assert.deepEqual(seen.stderr, ['err\n'])
  assert.equal(seen.results.length, 1)
  assert.equal(seen.results[0].isMainResult, false)
  assert.equal(seen.errors.length, 1)
  assert.equal(e.error.name, 'ValueError')
  assert.equal(e.error.value, 'bad value')
  assert.match(e.error.traceback, /ValueError/)
  assert.deepEqual(e.logs, { stdout: ['out\n'], stderr: ['err\n'] })
})

await step('contexts: create, run in, list, restart, remove', async () => {
  const ctx = await sbx.createCodeContext({ language: 'python', cwd: '/tmp' })
  assert.equal(ctx.language, 'python')
  assert.equal(ctx.cwd, '/tmp')
  const cwd = await sbx.runCode('import os; os.getcwd()', { context: ctx })
  assert.equal(cwd.text, "'/tmp'")
  // Its own variables: the default context's x is not there.
  const missing = await sbx.runCode('x', { context: ctx })
  assert.equal(missing.error?.name, 'NameError')
  await sbx.runCode('y = 7', { context: ctx })
  assert.equal((await sbx.runCode('y', { context: ctx })).text, '7')
  const listed = await sbx.listCodeContexts()
  assert.ok(listed.some((c) => c.id === ctx.id && c.cwd === '/tmp'), JSON.stringify(listed))
  await sbx.restartCodeContext(ctx)
  assert.equal((await sbx.runCode('y', { context: ctx })).error?.name, 'NameError')
  await sbx.removeCodeContext(ctx.id)
  assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
  await assert.rejects(sbx.runCode('1', { context: ctx }), /not found/i)
  // The default context kept its variables through all of it.
  assert.equal((await sbx.runCode('x')).text, '40')
})

await step('a JavaScript context: variables, console, await, errors', async () => {
  const js = await sbx.createCodeContext({ language: 'javascript' })
  assert.equal(js.language, 'javascript')
  await sbx.runCode('const greeting = "hi"; let n = 1', { context: js })
  const out = []
  const e = await sbx.runCode('console.log(greeting); n + 1', { context: js, onStdout: (m) => out.push(m.line) })
  assert.equal(e.text, '2')
  assert.deepEqual(out, ['hi\n'])
  assert.equal((await sbx.runCode('await new Promise((r) => setTimeout(r, 50)); n * 10', { context: js })).text, '10')
  const err = await sbx.runCode('null.x', { context: js })
  assert.equal(err.error?.name, 'TypeError')
  // The default JavaScript context is another one.
  assert.equal((await sbx.runCode('typeof greeting', { language: 'javascript' })).text, "'undefined'")
  // A language without a kernel is refused.
  await assert.rejects(sbx.runCode('1', { language: 'r' }), /400/)
  await sbx.removeCodeContext(js)
})

await step("a matplotlib chart's png and chart data", async () => {
  const e = await sbx.runCode(
    'import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2, 3], [4, 1, 9], label="series")\nax.set_title("Growth")\nax.set_xlabel("day")\nplt.show()',
  )
  assert.equal(e.error, undefined, JSON.stringify(e.error))
  const r = e.results.find((r) => r.png)
  assert.ok(r, `no png among ${e.results.map((r) => r.formats())}`)
  const png = Buffer.from(r.png, 'base64')
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
  assert.ok(png.length > 5000, `png of ${png.length} bytes`)
  assert.equal(r.chart?.type, 'line')
  assert.equal(r.chart.title, 'Growth')
  assert.equal(r.chart.x_label, 'day')
  assert.deepEqual(r.chart.elements[0].points, [[1, 4], [2, 1], [3, 9]])
  assert.equal(r.chart.elements[0].label, 'series')
})

await step("a pandas DataFrame's html and text", async () => {
  const e = await sbx.runCode('import pandas as pd\npd.DataFrame({"city": ["Oslo", "Lima"], "temp": [3, 19]})')
  const r = e.results.find((r) => r.isMainResult)
  assert.match(r.html, /<table[\s\S]*Oslo[\s\S]*Lima/)
  assert.match(r.text, /city\s+temp/)
})

await step('a result with malformed display data is skipped with a note', async () => {
  const e = await sbx.runCode('display({"image/png": "not base64 at all!", "text/plain": "ok"}, raw=True)\n"after"')
  assert.equal(e.results.length, 2, JSON.stringify(e.results))
  assert.equal(e.results[0].png, undefined)
  assert.equal(e.results[0].text, 'ok')
  assert.match(e.logs.stderr.join(''), /image\/png data was malformed/)
  assert.equal(e.text, "'after'")
})

await step('environment variables for one run', async () => {
  const e = await sbx.runCode('import os; os.environ["TUPPER_CI_VAR"]', { envs: { TUPPER_CI_VAR: 'from-run' } })
  assert.equal(e.text, "'from-run'")
  const after = await sbx.runCode('print(os.environ.get("TUPPER_CI_VAR"))')
  assert.deepEqual(after.logs.stdout, ['None\n'])
})

await step('a cell past its timeout is interrupted and the context stays usable', async () => {
  const t = performance.now()
  await assert.rejects(sbx.runCode('import time\nwhile True: time.sleep(0.1)', { timeoutMs: 1500 }), (e) => e.name === 'TimeoutError')
  assert.ok(performance.now() - t < 10000)
  const e = await sbx.runCode('x + 2')
  assert.equal(e.text, '42', JSON.stringify(e))
})

await step('a kernel that dies is reported, and restarts on the next run', async () => {
  const e = await sbx.runCode('import os; os._exit(3)')
  assert.equal(e.error?.name, 'KernelDied')
  assert.match(e.error.value, /restarts on the next run/)
  const again = await sbx.runCode('"alive"')
  assert.equal(again.text, "'alive'")
})

await step('50 MB of output is truncated with a marker', async () => {
  const e = await sbx.runCode('print("a" * (50 << 20))\n"after"')
  const total = e.logs.stdout.join('').length
  assert.ok(total < 20 << 20, `stdout of ${total} bytes`)
  assert.match(e.logs.stderr.join(''), /output truncated/)
})

await step('/execute needs the sandbox access token; /contexts is served on the id', async () => {
  const url = process.env.E2B_SANDBOX_URL
  const hdr = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999', 'Content-Type': 'application/json' }
  const body = JSON.stringify({ code: 'x' })
  let r = await fetch(`${url}/execute`, { method: 'POST', headers: hdr, body })
  assert.equal(r.status, 401, await r.text())
  r = await fetch(`${url}/execute`, { method: 'POST', headers: { ...hdr, 'X-Access-Token': 'sbt_notthisone' }, body })
  assert.ok(r.status === 401 || r.status === 403, `a wrong token: ${r.status}`)
  r = await fetch(`${url}/contexts`, { headers: hdr })
  assert.equal(r.status, 200)
})

await step('figure: later trivial cells', async () => {
  const times = []
  for (let i = 0; i < 30; i++) {
    const t = performance.now()
    const e = await sbx.runCode('1')
    times.push(performance.now() - t)
    assert.equal(e.text, '1')
  }
  console.log(`figure: runCode('1') p50 ${ms(median(times))} of ${times.length}, max ${ms(Math.max(...times))}`)
})

await step('a killed sandbox answers no more', async () => {
  await sbx.kill()
  await assert.rejects(sbx.runCode('1'))
})

console.log(`${steps.length} steps passed`)
