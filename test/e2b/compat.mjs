// The E2B compatibility script: E2B's JS SDK, unmodified, against tupper serve. Each project
// directory (v251, v245) pins an `e2b` version and runs it through its run.mjs with
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set; the Go test in this directory does that
// against a real server. Every step runs (one failing does not hide the others); run
// returns the number of failed steps.
import assert from 'node:assert/strict'

export async function run(sdk, sdkVersion) {
  const { Sandbox, CommandExitError, TimeoutError, AuthenticationError, FileType, FilesystemEventType, NotFoundError } = sdk
  for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
    if (!process.env[v]) throw new Error(`${v} is not set`)
  }
  console.log(`e2b ${sdkVersion} against ${process.env.E2B_API_URL}`)

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
  let failed = 0
  async function step(name, fn) {
    const t0 = Date.now()
    try {
      await fn()
      console.log(`ok   ${name} (${Date.now() - t0} ms)`)
    } catch (err) {
      failed++
      console.log(`FAIL ${name}: ${err?.stack ?? err}`)
    }
  }

  // until polls fn until it returns a truthy value or ms pass.
  async function until(what, ms, fn) {
    const end = Date.now() + ms
    for (;;) {
      const v = await fn()
      if (v) return v
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
      await sleep(50)
    }
  }

  const marker = `compat-${process.pid}-${Date.now()}`
  let sbx

  await step('create with metadata, envs and timeout', async () => {
    sbx = await Sandbox.create('base', {
      metadata: { suite: 'tupper-compat', marker },
      envs: { COMPAT_GREETING: 'hello from envs' },
      timeoutMs: 120_000,
    })
    assert.match(sbx.sandboxId, /^[a-z0-9]+$/)
    const info = await sbx.getInfo()
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.equal(info.metadata.marker, marker)
    assert.equal(info.state, 'running')
    const left = info.endAt.getTime() - Date.now()
    assert.ok(left > 60_000 && left <= 125_000, `endAt is ${left} ms away, want about 120 s`)
  })
  if (!sbx) {
    console.log('no sandbox: stopping')
    return failed
  }

  await step('commands.run with streaming callbacks, envs, user and home', async () => {
    const out = []
    const errs = []
    const r = await sbx.commands.run(
      'echo "$COMPAT_GREETING"; echo to-stderr >&2; for i in 1 2 3; do echo line$i; done; whoami; pwd; echo $HOME',
      { onStdout: (d) => out.push(d), onStderr: (d) => errs.push(d) },
    )
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'hello from envs\nline1\nline2\nline3\nuser\n/home/user\n/home/user\n')
    assert.equal(r.stderr, 'to-stderr\n')
    assert.equal(out.join(''), r.stdout)
    assert.equal(errs.join(''), 'to-stderr\n')
  })

  await step('streaming arrives before the command ends', async () => {
    let firstAt = 0
    const t0 = Date.now()
    const r = await sbx.commands.run('echo first; sleep 1.5; echo second', {
      onStdout: () => {
        if (!firstAt) firstAt = Date.now() - t0
      },
    })
    const total = Date.now() - t0
    assert.equal(r.stdout, 'first\nsecond\n')
    assert.ok(firstAt > 0 && firstAt < total - 1000, `first output after ${firstAt} ms of ${total} ms`)
  })

  await step('non-zero exit throws CommandExitError', async () => {
    await assert.rejects(sbx.commands.run('echo out; echo err >&2; exit 3'), (err) => {
      assert.ok(err instanceof CommandExitError, `got ${err?.constructor?.name}: ${err}`)
      assert.equal(err.exitCode, 3)
      assert.equal(err.stdout, 'out\n')
      assert.equal(err.stderr, 'err\n')
      return true
    })
  })

  await step('command timeout throws TimeoutError', async () => {
    const t0 = Date.now()
    await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 1500 }), (err) => {
      assert.ok(err instanceof TimeoutError, `got ${err?.constructor?.name}: ${err}`)
      return true
    })
    assert.ok(Date.now() - t0 < 15_000, 'the timeout took too long')
  })

  await step('background command: list, connect, kill', async () => {
    const h = await sbx.commands.run('echo started; sleep 300', { background: true })
    assert.ok(h.pid > 0)
    const procs = await sbx.commands.list()
    assert.ok(procs.some((p) => p.pid === h.pid), `pid ${h.pid} not in ${JSON.stringify(procs.map((p) => p.pid))}`)
    const seen = []
    const h2 = await sbx.commands.connect(h.pid, { onStdout: (d) => seen.push(d) })
    assert.equal(h2.pid, h.pid)
    assert.equal(await sbx.commands.kill(h.pid), true)
    const res = await h.wait().then(
      (r) => r,
      (e) => e,
    )
    assert.ok(res.exitCode !== 0, `a killed command exited ${res.exitCode}`)
    await until('the killed process to leave the list', 5000, async () => !(await sbx.commands.list()).some((p) => p.pid === h.pid))
    assert.equal(await sbx.commands.kill(h.pid), false)
  })

  await step('stdin: sendStdin then close', async () => {
    const h = await sbx.commands.run('read a; read b; echo "got $a and $b"', { background: true, stdin: true })
    await h.sendStdin('first\n')
    await h.sendStdin('second\n')
    const r = await h.wait()
    assert.equal(r.stdout, 'got first and second\n')
    const h2 = await sbx.commands.run('cat; echo done', { background: true, stdin: true })
    await sbx.commands.sendStdin(h2.pid, 'via sandbox\n')
    if (typeof sbx.commands.closeStdin === 'function') {
      await sbx.commands.closeStdin(h2.pid)
      const r2 = await h2.wait()
      assert.equal(r2.stdout, 'via sandbox\ndone\n')
    } else {
      await h2.kill()
    }
  })

  await step('pty: create, sendInput, resize, kill', async () => {
    const dec = new TextDecoder()
    let out = ''
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d, { stream: true }) } })
    assert.ok(term.pid > 0, `pty pid ${term.pid}`)
    const enc = new TextEncoder()
    // Only the shell's expansion prints pty-42; the echoed input shows pty-$((40+2)).
    await sbx.pty.sendInput(term.pid, enc.encode('echo pty-$((40+2))\n'))
    await until(`pty-42 in the pty's output (so far ${JSON.stringify(out)})`, 15_000, async () => out.includes('pty-42'))
    await sbx.pty.resize(term.pid, { cols: 91, rows: 37 })
    await sbx.pty.sendInput(term.pid, enc.encode('stty size; echo sz-$((1+1))\n'))
    await until(`"37 91" after the resize (so far ${JSON.stringify(out)})`, 15_000, async () => /37 91\s+sz-2/.test(out))
    assert.equal(await sbx.pty.kill(term.pid), true)
    const res = await term.wait().catch((err) => err)
    assert.ok(res.exitCode !== 0, `a killed pty exited ${res.exitCode}`)
  })

  await step('files: write, read, list, exists, getInfo', async () => {
    const info = await sbx.files.write('compat/a.txt', 'alpha\n')
    assert.equal(info.path, '/home/user/compat/a.txt')
    assert.equal(await sbx.files.read('/home/user/compat/a.txt'), 'alpha\n')
    const bytes = await sbx.files.read('compat/a.txt', { format: 'bytes' })
    assert.equal(Buffer.from(bytes).toString(), 'alpha\n')
    await sbx.files.write([
      { path: 'compat/b.txt', data: 'beta' },
      { path: '/home/user/compat/sub/c.txt', data: new Blob(['gamma']) },
    ])
    const names = (await sbx.files.list('compat')).map((e) => e.name).sort()
    assert.deepEqual(names, ['a.txt', 'b.txt', 'sub'])
    assert.equal(await sbx.files.exists('compat/b.txt'), true)
    assert.equal(await sbx.files.exists('compat/nope.txt'), false)
    const st = await sbx.files.getInfo('compat/a.txt')
    assert.equal(st.type, FileType.FILE)
    assert.equal(st.size, 6)
    assert.equal(st.path, '/home/user/compat/a.txt')
    const dir = await sbx.files.getInfo('compat/sub')
    assert.equal(dir.type, FileType.DIR)
    const owner = await sbx.commands.run('stat -c %U compat/a.txt')
    assert.equal(owner.stdout.trim(), 'user')
    await assert.rejects(sbx.files.read('compat/missing.txt'), (err) => err instanceof NotFoundError || /not found/i.test(String(err)))
  })

  await step('files: makeDir, rename, remove', async () => {
    assert.equal(await sbx.files.makeDir('compat/newdir/deep'), true)
    assert.equal(await sbx.files.makeDir('compat/newdir/deep'), false)
    const moved = await sbx.files.rename('compat/b.txt', 'compat/newdir/b2.txt')
    assert.equal(moved.path, '/home/user/compat/newdir/b2.txt')
    assert.equal(await sbx.files.exists('compat/b.txt'), false)
    assert.equal(await sbx.files.read('compat/newdir/b2.txt'), 'beta')
    await sbx.files.remove('compat/newdir')
    assert.equal(await sbx.files.exists('compat/newdir'), false)
  })

  await step('files: watchDir', async () => {
    await sbx.files.makeDir('compat/watched')
    const events = []
    let exit
    const w = await sbx.files.watchDir('compat/watched', (e) => events.push(e), { onExit: (err) => { exit = err ?? 'ended' } })
    try {
      await sbx.files.write('compat/watched/new.txt', 'x')
      await until('a watch event for new.txt', 10_000, async () => events.some((e) => e.name === 'new.txt')).catch((err) => {
        throw new Error(`${err.message}; events seen: ${JSON.stringify(events)}; stream exit: ${exit}`)
      })
      assert.ok(events.some((e) => e.name === 'new.txt' && (e.type === FilesystemEventType.CREATE || e.type === FilesystemEventType.WRITE)))
    } finally {
      await w.stop()
    }
  })

  // A write right after watchDir returns must be seen, every time: the proxy once cut about
  // one stream in twenty just after its start message (the client saw only "terminated").
  await step('files: watchDir then write at once, 50 times', async () => {
    for (let i = 0; i < 50; i++) {
      const dir = `compat/watchloop/w${i}`
      await sbx.files.makeDir(dir)
      const events = []
      let exit
      const w = await sbx.files.watchDir(dir, (e) => events.push(e), { onExit: (err) => { exit = err ?? 'ended' } })
      try {
        await sbx.files.write(`${dir}/new.txt`, 'x')
        await until(`a watch event for ${dir}/new.txt`, 5_000, async () => events.some((e) => e.name === 'new.txt')).catch((err) => {
          throw new Error(`iteration ${i}: ${err.message}; events seen: ${JSON.stringify(events)}; stream exit: ${exit}`)
        })
      } finally {
        await w.stop()
      }
    }
    await sbx.files.remove('compat/watchloop')
  })

  await step('uploadUrl and downloadUrl (plain fetch, no SDK headers)', async () => {
    const up = await sbx.uploadUrl('/home/user/compat/uploaded.txt')
    assert.match(up, /signature=v1_/)
    const form = new FormData()
    form.append('file', new Blob(['uploaded by url']), 'uploaded.txt')
    const res = await fetch(up, { method: 'POST', body: form })
    assert.equal(res.status, 200, await res.text())
    const down = await sbx.downloadUrl('/home/user/compat/uploaded.txt')
    const got = await fetch(down)
    assert.equal(got.status, 200)
    assert.equal(await got.text(), 'uploaded by url')
    const forged = new URL(down)
    forged.searchParams.set('path', '/etc/shadow')
    assert.notEqual((await fetch(forged)).status, 200)
    const bare = await fetch(`${process.env.E2B_SANDBOX_URL}/files?path=/etc/passwd`, { headers: { 'E2b-Sandbox-Id': sbx.sandboxId } })
    assert.equal(bare.status, 401)
  })

  await step('Sandbox.connect', async () => {
    const again = await Sandbox.connect(sbx.sandboxId)
    assert.equal(again.sandboxId, sbx.sandboxId)
    assert.equal(await again.files.read('compat/a.txt'), 'alpha\n')
    const r = await again.commands.run('echo connected')
    assert.equal(r.stdout, 'connected\n')
    assert.equal(await again.isRunning(), true)
  })

  await step('Sandbox.list with a metadata filter', async () => {
    const other = await Sandbox.create('base', { metadata: { suite: 'tupper-compat', marker: marker + '-other' }, timeoutMs: 60_000 })
    try {
      const found = []
      const pager = Sandbox.list({ query: { metadata: { marker } }, limit: 1 })
      while (pager.hasNext) found.push(...(await pager.nextItems()))
      assert.deepEqual(found.map((s) => s.sandboxId), [sbx.sandboxId])
      assert.equal(found[0].metadata.marker, marker)
      const all = []
      const p2 = Sandbox.list({ query: { metadata: { suite: 'tupper-compat' } }, limit: 1 })
      let pages = 0
      while (p2.hasNext) {
        all.push(...(await p2.nextItems()))
        pages++
      }
      assert.ok(pages >= 2, `paging: ${pages} page(s)`)
      assert.deepEqual(all.map((s) => s.sandboxId).sort(), [sbx.sandboxId, other.sandboxId].sort())
      const running = []
      const p3 = Sandbox.list({ query: { metadata: { marker }, state: ['running'] } })
      while (p3.hasNext) running.push(...(await p3.nextItems()))
      assert.equal(running.length, 1)
    } finally {
      await other.kill()
    }
  })

  await step('setTimeout moves endAt', async () => {
    await sbx.setTimeout(30_000)
    const info = await sbx.getInfo()
    const left = info.endAt.getTime() - Date.now()
    assert.ok(left > 20_000 && left <= 31_000, `endAt is ${left} ms away, want about 30 s`)
    await sbx.setTimeout(120_000)
  })

  await step('getMetrics', async () => {
    const ms = await sbx.getMetrics()
    assert.ok(Array.isArray(ms))
    if (ms.length > 0) {
      const m = ms[0]
      for (const k of ['cpuCount', 'cpuUsedPct', 'memUsed', 'memTotal', 'diskUsed', 'diskTotal']) assert.equal(typeof m[k], 'number', k)
      assert.ok(m.memTotal > 0 && m.diskTotal > 0)
    }
  })

  await step('a wrong API key is refused with AuthenticationError', async () => {
    const wrong = 'e2b_' + '0'.repeat(40)
    await assert.rejects(Sandbox.create('base', { apiKey: wrong }), (err) => {
      assert.ok(err instanceof AuthenticationError, `got ${err?.constructor?.name}: ${err}`)
      return true
    })
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId, { apiKey: wrong }), AuthenticationError)
  })

  await step('a wrong access token is refused on the data plane', async () => {
    const res = await fetch(`${process.env.E2B_SANDBOX_URL}/filesystem.Filesystem/ListDir`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': 'sbt_wrong' },
      body: JSON.stringify({ path: '/', depth: 1 }),
    })
    assert.equal(res.status, 401)
  })

  await step('kill', async () => {
    const id = sbx.sandboxId
    await sbx.kill()
    assert.equal(await Sandbox.kill(id), false)
    await assert.rejects(Sandbox.getInfo(id), /not found/i)
    const res = await fetch(`${process.env.E2B_SANDBOX_URL}/health`, { headers: { 'E2b-Sandbox-Id': id } })
    assert.equal(res.status, 502)
    assert.equal((await res.json()).message, 'The sandbox was not found')
  })

  console.log(failed ? `${failed} step(s) failed` : 'all steps passed')
  return failed
}
