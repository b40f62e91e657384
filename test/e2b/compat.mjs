// The E2B compatibility script: E2B's JS SDK, unmodified, against tupper serve. Each project
// directory (v251, v245) pins an `e2b` version and runs it through its run.mjs with
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set; the Go test in this directory does that
// against a real server. Every step runs (one failing does not hide the others); run
// returns the number of failed steps.
import assert from 'node:assert/strict'
import http from 'node:http'

// hostGet sends GET path to the server with Host set to host (a {port}-{id}.{domain} name,
// which nothing resolves here) and the headers, and returns the status and body.
function hostGet(host, path, headers) {
  const u = new URL(process.env.E2B_SANDBOX_URL)
  return new Promise((resolve, reject) => {
    const req = http.request({ hostname: u.hostname, port: u.port, path, headers: { ...headers, Host: host } }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (d) => { body += d })
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', reject)
    req.end()
  })
}

export async function run(sdk, sdkVersion) {
  const { Sandbox, Template, Volume, BuildError, CommandExitError, TimeoutError, AuthenticationError, FileType, FilesystemEventType, NotFoundError } = sdk
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

  await step('a user the sandbox does not have, in envd\'s words', async () => {
    await assert.rejects(sbx.commands.run('true', { user: 'no-such-user' }), (err) => {
      assert.match(String(err.message), /invalid username: 'no-such-user'/)
      return true
    })
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

  await step('a command the OOM killer ends throws CommandExitError with error oom_killed', async () => {
    // tail keeps a whole line, and /dev/zero has none: it grows to the sandbox's memory limit.
    await assert.rejects(sbx.commands.run('head -c 8G /dev/zero | tail > /dev/null'), (err) => {
      assert.ok(err instanceof CommandExitError, `got ${err?.constructor?.name}: ${err}`)
      assert.equal(err.exitCode, 137)
      assert.match(String(err.error), /^oom_killed: /)
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

  // envd 0.6.2: file metadata kept with the file, reported by write, getInfo, list and
  // rename, replaced by the next write; 0.6.3: entries in watch events.
  await step('files: metadata (envd 0.6.2) and watch entries (0.6.3)', async () => {
    const md = { author: 'mish', purpose: 'upload' }
    const info = await sbx.files.write('compat/md.txt', 'with metadata', { metadata: md })
    assert.deepEqual(info.metadata, md)
    assert.deepEqual((await sbx.files.getInfo('compat/md.txt')).metadata, md)
    const [octet] = await sbx.files.write([{ path: 'compat/md2.txt', data: 'x' }], { metadata: { tag: 'two' }, useOctetStream: true })
    assert.deepEqual(octet.metadata, { tag: 'two' })
    const listed = (await sbx.files.list('compat')).find((e) => e.name === 'md.txt')
    assert.deepEqual(listed?.metadata, md)
    const moved = await sbx.files.rename('compat/md.txt', 'compat/md-moved.txt')
    assert.deepEqual(moved.metadata, md)
    const plain = await sbx.files.write('compat/md-moved.txt', 'rewritten')
    assert.equal(plain.metadata, undefined)
    assert.equal((await sbx.files.getInfo('compat/md-moved.txt')).metadata, undefined)

    await sbx.files.makeDir('compat/watched-entry')
    const events = []
    const w = await sbx.files.watchDir('compat/watched-entry', (e) => events.push(e), { includeEntry: true })
    try {
      await sbx.files.write('compat/watched-entry/e.txt', 'entry')
      await until('a watch event with an entry for e.txt', 10_000, async () => events.some((e) => e.name === 'e.txt' && e.entry))
      const e = events.find((e) => e.name === 'e.txt' && e.entry)
      assert.equal(e.entry.path, '/home/user/compat/watched-entry/e.txt')
    } finally {
      await w.stop()
    }
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

  await step('uploadUrl and downloadUrl (plain fetch, no credential)', async () => {
    // With E2B_SANDBOX_URL the SDK's signed URLs are that URL plus /files?…: they name no
    // sandbox, and the server finds the one that signed them; E2b-Sandbox-Id may name it
    // (with --domain and no E2B_SANDBOX_URL, their host 49983-{id}.DOMAIN does).
    const named = { headers: { 'E2b-Sandbox-Id': sbx.sandboxId } }
    const up = await sbx.uploadUrl('/home/user/compat/uploaded.txt')
    assert.match(up, /signature=v1_/)
    const form = new FormData()
    form.append('file', new Blob(['uploaded by url']), 'uploaded.txt')
    const res = await fetch(up, { method: 'POST', body: form, ...named })
    assert.equal(res.status, 200, await res.text())
    const down = await sbx.downloadUrl('/home/user/compat/uploaded.txt')
    const got = await fetch(down, named)
    assert.equal(got.status, 200)
    assert.equal(await got.text(), 'uploaded by url')
    const unnamed = await fetch(down)
    assert.equal(unnamed.status, 200, 'a plain fetch of the SDK\'s URL')
    assert.equal(await unnamed.text(), 'uploaded by url')
    const forged = new URL(down)
    forged.searchParams.set('path', '/etc/shadow')
    assert.notEqual((await fetch(forged, named)).status, 200)
    const bare = await fetch(`${process.env.E2B_SANDBOX_URL}/files?path=/etc/passwd`, named)
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

  await step('metadata round-trip exactly: getInfo and list show what was set, nothing more', async () => {
    const want = { suite: 'tupper-compat', marker }
    assert.deepEqual((await sbx.getInfo()).metadata, want)
    const listed = []
    const p = Sandbox.list({ query: { metadata: { marker } } })
    while (p.hasNext) listed.push(...(await p.nextItems()))
    assert.equal(listed.length, 1)
    assert.deepEqual(listed[0].metadata, want)
  })

  await step('list: newest first by default, oldest first with order asc, startedAfter is at or after', async () => {
    const newer = await Sandbox.create('base', { metadata: { suite: 'tupper-compat', marker: marker + '-newer' }, timeoutMs: 60_000 })
    try {
      const mine = new Set([sbx.sandboxId, newer.sandboxId])
      const ids = async (opts = {}) => {
        const out = []
        const p = Sandbox.list({ ...opts, query: { metadata: { suite: 'tupper-compat' }, ...opts.query } })
        while (p.hasNext) out.push(...(await p.nextItems()))
        return out.map((s) => s.sandboxId).filter((id) => mine.has(id))
      }
      assert.deepEqual(await ids(), [newer.sandboxId, sbx.sandboxId], 'the default order')
      assert.deepEqual(await ids({ limit: 1 }), [newer.sandboxId, sbx.sandboxId], 'the default order, one per page')
      assert.deepEqual(await ids({ order: 'asc' }), [sbx.sandboxId, newer.sandboxId], 'order asc')
      assert.deepEqual(await ids({ order: 'desc' }), [newer.sandboxId, sbx.sandboxId], 'order desc')
      const at = (await newer.getInfo()).startedAt
      assert.deepEqual(await ids({ query: { startedAfter: at } }), [newer.sandboxId], 'startedAfter the newer one\'s own startedAt')
      assert.deepEqual(await ids({ query: { startedAfter: (await sbx.getInfo()).startedAt } }), [newer.sandboxId, sbx.sandboxId], 'startedAfter the older one\'s startedAt')
      assert.deepEqual(await ids({ query: { startedAfter: new Date(at.getTime() + 1) } }), [], 'startedAfter a millisecond later')
    } finally {
      await newer.kill()
    }
  })

  await step('an expired signed URL: 401 with envd\'s message', async () => {
    await sbx.files.write('compat/signed.txt', 'signed')
    const expired = await sbx.downloadUrl('compat/signed.txt', { useSignatureExpiration: -10_000 })
    const named = { headers: { 'E2b-Sandbox-Id': sbx.sandboxId } }
    const res = await fetch(expired, named)
    assert.equal(res.status, 401)
    assert.deepEqual(await res.json(), { code: 401, message: 'signature is already expired' })
    const valid = await sbx.downloadUrl('compat/signed.txt', { useSignatureExpiration: 10_000 })
    const ok = await fetch(valid, named)
    assert.equal(ok.status, 200)
    assert.equal(await ok.text(), 'signed')
  })

  await step('createSnapshot, then a sandbox from the snapshot', async () => {
    await sbx.files.write('compat/snap.txt', 'in the snapshot')
    const snap = await sbx.createSnapshot()
    assert.ok(snap.snapshotId, `snapshot ${JSON.stringify(snap)}`)
    const child = await Sandbox.create(snap.snapshotId, { timeoutMs: 60_000 })
    try {
      assert.equal(await child.files.read('compat/snap.txt'), 'in the snapshot')
    } finally {
      await child.kill()
    }
    assert.equal(await sbx.isRunning(), true)
  })

  await step('pause: isRunning is false at once, envd calls fail fast, connect resumes', async () => {
    const p = await Sandbox.create('base', { metadata: { suite: 'tupper-compat-pause' }, envs: { KEPT: 'kept' }, timeoutMs: 120_000 })
    try {
      await p.files.write('before-pause.txt', 'still here')
      assert.equal((await p.commands.run('echo $KEPT')).stdout, 'kept\n')
      const bg = await p.commands.run('sleep 300', { background: true })
      // Reach the sandbox just before the pause: the proxy keeps that connection to the
      // agent for the next request, and the agent will be frozen.
      assert.equal(await p.isRunning(), true)
      assert.equal(await p.pause(), true)
      let t0 = Date.now()
      assert.equal(await p.isRunning({ requestTimeoutMs: 10_000 }), false)
      const took = Date.now() - t0
      assert.ok(took < 2000, `isRunning answered ${took} ms after the pause`)
      console.log(`     isRunning after the pause: false in ${took} ms`)
      t0 = Date.now()
      // The SDK makes the proxy's 502 a TimeoutError, with the proxy's message.
      await assert.rejects(p.files.read('before-pause.txt', { requestTimeoutMs: 10_000 }), /The sandbox is paused/)
      assert.ok(Date.now() - t0 < 2000, `a read of a paused sandbox failed after ${Date.now() - t0} ms`)
      assert.equal((await p.getInfo()).state, 'paused')
      assert.equal(await p.pause(), false, 'a second pause')
      await p.connect()
      assert.equal(await p.isRunning(), true)
      assert.equal(await p.files.read('before-pause.txt'), 'still here')
      assert.equal((await p.commands.run('echo $KEPT')).stdout, 'kept\n')
      assert.ok((await p.commands.list()).some((c) => c.pid === bg.pid), 'the background command survived the pause')
      assert.equal(await p.commands.kill(bg.pid), true)
    } finally {
      await p.kill()
    }
  })

  // sleepers counts the processes "sleep 1001" in a sandbox, whichever agent started them.
  const sleepers = `n=0; for f in /proc/[0-9]*/cmdline; do if [ "$(tr '\\0' ' ' < $f 2>/dev/null)" = "sleep 1001 " ]; then n=$((n+1)); fi; done; echo $n`

  await step('pause({ keepMemory: false }): the files stay, the processes do not, connect boots it again', async () => {
    const p = await Sandbox.create('base', { metadata: { suite: 'tupper-compat-pause-cold' }, envs: { KEPT: 'kept' }, timeoutMs: 120_000 })
    try {
      await p.files.write('cold.txt', 'on disk')
      await p.commands.run('sleep 1001', { background: true })
      // The start event comes once the command's shell runs, maybe before it has exec'd
      // sleep (so in E2B's envd too): wait until the sleeper is there to be counted.
      await until('the background sleeper', 10_000, async () => (await p.commands.run(sleepers)).stdout === '1\n')
      assert.equal(await p.pause({ keepMemory: false }), true)
      assert.equal((await p.getInfo()).state, 'paused')
      assert.equal(await p.isRunning({ requestTimeoutMs: 10_000 }), false)
      assert.equal(await p.pause({ keepMemory: false }), false, 'a second pause')
      const again = await Sandbox.connect(p.sandboxId, { timeoutMs: 60_000 })
      assert.equal((await again.getInfo()).state, 'running')
      assert.equal(await again.files.read('cold.txt'), 'on disk')
      assert.equal((await again.commands.run('echo $KEPT')).stdout, 'kept\n', 'the envs after a cold boot')
      assert.equal((await again.commands.run(sleepers)).stdout, '0\n', 'a background command survived a pause without memory')
    } finally {
      await p.kill()
    }
  })

  await step('createSnapshot with a name, listSnapshots by sandbox and by name, create from it, deleteSnapshot', async () => {
    const name = `compat-snap-${process.pid}`
    await sbx.files.write('compat/named-snap.txt', 'named')
    const snap = await sbx.createSnapshot({ name })
    assert.deepEqual(snap.names, [name])
    const mine = await sbx.listSnapshots().nextItems()
    assert.ok(mine.some((s) => s.snapshotId === snap.snapshotId), `listSnapshots of the sandbox: ${JSON.stringify(mine)}`)
    const byName = await Sandbox.listSnapshots({ name }).nextItems()
    assert.deepEqual(byName.map((s) => s.snapshotId), [snap.snapshotId])
    const child = await Sandbox.create(snap.snapshotId, { timeoutMs: 60_000 })
    try {
      assert.equal(await child.files.read('compat/named-snap.txt'), 'named')
    } finally {
      await child.kill()
    }
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false, 'deleting it again')
    const after = await Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }).nextItems()
    assert.ok(!after.some((s) => s.snapshotId === snap.snapshotId), 'the deleted snapshot is still listed')
    await assert.rejects(Sandbox.create(snap.snapshotId, { timeoutMs: 60_000 }))
  })

  await step('fork: children with the parent\'s files, independent of each other, the parent running', async () => {
    await sbx.files.write('compat/fork.txt', 'from the parent')
    const kids = await sbx.fork({ count: 2, timeoutMs: 60_000 })
    try {
      assert.equal(kids.length, 2)
      for (const k of kids) {
        assert.ok(k instanceof Sandbox, `a fork failed: ${k}`)
        assert.notEqual(k.sandboxId, sbx.sandboxId)
        assert.equal(await k.files.read('compat/fork.txt'), 'from the parent')
      }
      await kids[0].files.write('compat/only-first.txt', 'mine')
      assert.equal(await kids[1].files.exists('compat/only-first.txt'), false, 'a write in one fork is seen by another')
      assert.equal(await sbx.files.exists('compat/only-first.txt'), false, 'a write in a fork is seen by the parent')
      assert.equal(await sbx.isRunning(), true)
    } finally {
      for (const k of kids) if (k instanceof Sandbox) await k.kill()
    }
  })

  await step('lifecycle onTimeout pause: paused at its timeout, kept, connect resumes it', async () => {
    const a = await Sandbox.create('base', { timeoutMs: 120_000, lifecycle: { onTimeout: 'pause' }, metadata: { suite: 'tupper-compat-autopause' } })
    try {
      assert.deepEqual((await a.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: false })
      await a.files.write('kept.txt', 'across the timeout')
      const bg = await a.commands.run('sleep 600', { background: true })
      await a.setTimeout(2_000)
      await until('the pause at the timeout', 60_000, async () => (await a.getInfo()).state === 'paused')
      await sleep(1_500)
      assert.equal((await a.getInfo()).state, 'paused', 'a paused sandbox has no timeout')
      const again = await Sandbox.connect(a.sandboxId, { timeoutMs: 60_000 })
      assert.equal((await again.getInfo()).state, 'running')
      assert.equal(await again.files.read('kept.txt'), 'across the timeout')
      assert.ok((await again.commands.list()).some((c) => c.pid === bg.pid), 'the background command survived the pause')
    } finally {
      await a.kill()
    }
  })

  await step('lifecycle onTimeout { action: pause, keepMemory: false }: paused at its timeout with its files only, connect boots it', async () => {
    const a = await Sandbox.create('base', { timeoutMs: 120_000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } }, metadata: { suite: 'tupper-compat-autopause-cold' } })
    try {
      assert.deepEqual((await a.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: false })
      await a.files.write('kept.txt', 'across the timeout')
      await a.commands.run('sleep 1001', { background: true })
      await until('the background sleeper', 10_000, async () => (await a.commands.run(sleepers)).stdout === '1\n')
      await a.setTimeout(2_000)
      await until('the pause at the timeout', 60_000, async () => (await a.getInfo()).state === 'paused')
      const again = await Sandbox.connect(a.sandboxId, { timeoutMs: 60_000 })
      assert.equal((await again.getInfo()).state, 'running')
      assert.equal(await again.files.read('kept.txt'), 'across the timeout')
      assert.equal((await again.commands.run(sleepers)).stdout, '0\n', 'a background command survived a pause without memory')
    } finally {
      await a.kill()
    }
  })

  await step('lifecycle autoResume: a paused sandbox resumes when its agent or a port is used', async () => {
    const b = await Sandbox.create('base', { timeoutMs: 120_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
    try {
      assert.deepEqual((await b.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: true })
      await b.files.write('www/index.html', 'woken')
      await b.commands.run('cd www && exec python3 -m http.server 8090', { background: true })
      const host = b.getHost(8090)
      const withKey = { 'X-API-Key': process.env.E2B_API_KEY }
      await until('the server in the sandbox', 20_000, async () => (await hostGet(host, '/index.html', withKey)).status === 200)
      assert.equal(await b.pause(), true)
      assert.equal((await b.getInfo()).state, 'paused')
      assert.equal(await b.files.read('www/index.html'), 'woken')
      assert.equal((await b.getInfo()).state, 'running', 'a read through envd resumed it')
      assert.equal(await b.pause(), true)
      const res = await hostGet(host, '/index.html', withKey)
      assert.equal(res.status, 200, `the port of a paused sandbox: ${res.status} ${res.body}`)
      assert.equal(res.body, 'woken')
      assert.equal((await b.getInfo()).state, 'running', 'a request to its port resumed it')
    } finally {
      await b.kill()
    }
  })

  await step('network.allowPublicTraffic false: its ports answer only with the traffic access token', async () => {
    assert.equal(sbx.trafficAccessToken, undefined, 'a sandbox with public traffic has no traffic access token')
    const priv = await Sandbox.create('base', { network: { allowPublicTraffic: false }, metadata: { suite: 'tupper-compat-private' }, timeoutMs: 120_000 })
    try {
      assert.ok(priv.trafficAccessToken, `trafficAccessToken is ${priv.trafficAccessToken}`)
      assert.equal((await priv.getInfo()).network?.allowPublicTraffic, false)
      assert.deepEqual((await priv.getInfo()).metadata, { suite: 'tupper-compat-private' })
      await priv.files.write('www/index.html', 'served from the sandbox')
      const web = await priv.commands.run('cd www && exec python3 -m http.server 8080', { background: true })
      const host = priv.getHost(8080)
      assert.match(host, new RegExp(`^8080-${priv.sandboxId}\\.`))
      const withToken = { 'e2b-traffic-access-token': priv.trafficAccessToken }
      const ok = await until('the web server in the sandbox', 20_000, async () => {
        const r = await hostGet(host, '/index.html', withToken)
        return r.status === 200 ? r : null
      })
      assert.equal(ok.body, 'served from the sandbox')
      for (const [what, headers] of [
        ['no token', {}],
        ['a wrong token', { 'e2b-traffic-access-token': 'f'.repeat(40) }],
        ['an API key instead', { 'X-API-Key': process.env.E2B_API_KEY }],
        ['the envd access token instead', { 'e2b-traffic-access-token': priv.envdAccessToken ?? 'none' }],
      ]) {
        const r = await hostGet(host, '/index.html', headers)
        assert.equal(r.status, 403, `${what}: ${r.status} ${r.body}`)
        assert.equal(JSON.parse(r.body).code, 403, what)
      }
      // Without DNS for getHost's names: E2B's routing headers on E2B_SANDBOX_URL reach the
      // same port under the same rule.
      const byHeaders = (headers) => fetch(new URL('/index.html', process.env.E2B_SANDBOX_URL),
        { headers: { 'E2b-Sandbox-Id': priv.sandboxId, 'E2b-Sandbox-Port': '8080', ...headers } })
      const hr = await byHeaders(withToken)
      assert.equal(hr.status, 200)
      assert.equal(await hr.text(), 'served from the sandbox')
      const hn = await byHeaders({ 'X-API-Key': process.env.E2B_API_KEY })
      assert.equal(hn.status, 403, `routing headers with an API key instead: ${hn.status}`)
      const again = await Sandbox.connect(priv.sandboxId)
      assert.equal(again.trafficAccessToken, priv.trafficAccessToken, 'connect returns the traffic access token')
      await web.kill()
    } finally {
      await priv.kill()
    }
  })

  await step('network.allowPublicTraffic true: its ports take anyone, as E2B\'s; without it a credential', async () => {
    const pub = await Sandbox.create('base', { network: { allowPublicTraffic: true }, timeoutMs: 120_000 })
    try {
      await pub.files.write('www/index.html', 'public')
      await pub.commands.run('cd www && exec python3 -m http.server 8092', { background: true })
      const get = (id) => fetch(new URL('/index.html', process.env.E2B_SANDBOX_URL),
        { headers: { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '8092' } })
      const body = await until('the server in the sandbox', 20_000, async () => {
        const r = await get(pub.sandboxId)
        return r.status === 200 ? await r.text() : null
      })
      assert.equal(body, 'public')
      assert.equal((await get(sbx.sandboxId)).status, 401, 'a port of a sandbox that did not ask for public traffic, without a credential')
    } finally {
      await pub.kill()
    }
  })

  await step('network.maskRequestHost: the sandbox\'s ports see the mask as Host', async () => {
    const m = await Sandbox.create('base', { network: { maskRequestHost: 'app-${PORT}.internal' }, timeoutMs: 120_000 })
    try {
      assert.equal((await m.getInfo()).network?.maskRequestHost, 'app-${PORT}.internal')
      await m.files.write('echo_host.py', [
        'import http.server',
        'class H(http.server.BaseHTTPRequestHandler):',
        '    def do_GET(self):',
        "        b = (self.headers.get('Host', '') + '|' + self.headers.get('X-Forwarded-Host', '')).encode()",
        '        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)',
        "http.server.HTTPServer(('0.0.0.0', 8091), H).serve_forever()",
      ].join('\n') + '\n')
      await m.commands.run('exec python3 echo_host.py', { background: true })
      const body = await until('the server in the sandbox', 20_000, async () => {
        const r = await fetch(new URL('/', process.env.E2B_SANDBOX_URL), {
          headers: { 'E2b-Sandbox-Id': m.sandboxId, 'E2b-Sandbox-Port': '8091', 'X-API-Key': process.env.E2B_API_KEY },
        })
        return r.status === 200 ? await r.text() : null
      })
      assert.equal(body.split('|')[0], 'app-8091.internal')
    } finally {
      await m.kill()
    }
  })

  // egressProbe runs in a sandbox: "rcode NAME..." asks the sandbox's nameserver for each
  // NAME's AAAA record and prints the answer's rcode (0 answered, 3 no such name); "connect
  // ADDR PORT" connects and reads, printing how it ended. Under a policy neither sends a
  // packet past the host: the egress proxy answers AAAA of allowed names and refuses denied
  // names itself, and resets a connection to an address it does not allow without dialling.
  const egressProbe = [
    'import socket, struct, sys',
    'def ns():',
    '    for l in open("/etc/resolv.conf"):',
    '        f = l.split()',
    '        if f[:1] == ["nameserver"]: return f[1]',
    'def rcode(name):',
    '    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)',
    '    q = struct.pack(">HHHHHH", 0x5454, 0x0100, 1, 0, 0, 0) + b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\\0" + struct.pack(">HH", 28, 1)',
    '    try:',
    '        s.sendto(q, (ns(), 53)); return str(s.recv(512)[3] & 15)',
    '    except OSError as e: return type(e).__name__',
    'def connect(addr, port):',
    '    s = socket.socket(); s.settimeout(5)',
    '    try:',
    '        s.connect((addr, int(port))); s.recv(1); return "open"',
    '    except OSError as e: return type(e).__name__',
    'if sys.argv[1] == "rcode": print(" ".join(rcode(n) for n in sys.argv[2:]))',
    'else: print(connect(sys.argv[2], sys.argv[3]))',
  ].join('\n') + '\n'
  const probe = async (box, args) => {
    await box.files.write('/tmp/egress-probe.py', egressProbe)
    return (await box.commands.run(`python3 /tmp/egress-probe.py ${args}`)).stdout.trim()
  }

  await step('egress: allowInternetAccess false, network.allowOut/denyOut on create, updateNetwork (on the default network too)', async () => {
    const off = await Sandbox.create('base', { allowInternetAccess: false, metadata: { suite: 'tupper-compat-egress' }, timeoutMs: 120_000 })
    try {
      assert.equal((await off.commands.run('ls /sys/class/net')).stdout.trim(), 'lo', 'allowInternetAccess false: loopback only')
    } finally {
      await off.kill()
    }
    // allowOut wins over denyOut 0.0.0.0/0: only allowed.test.
    const pol = await Sandbox.create('base', { network: { allowOut: ['allowed.test'], denyOut: ['0.0.0.0/0'] }, metadata: { suite: 'tupper-compat-egress' }, timeoutMs: 120_000 })
    try {
      assert.equal(await probe(pol, 'rcode allowed.test denied.test'), '0 3')
      assert.equal(await probe(pol, 'connect 11.22.33.44 7000'), 'ConnectionResetError', 'an address no allowed name gave')
      await pol.updateNetwork({ allowOut: ['denied.test'], denyOut: ['0.0.0.0/0'] })
      assert.equal(await probe(pol, 'rcode allowed.test denied.test'), '3 0', 'after updateNetwork')
      await pol.updateNetwork({ allowInternetAccess: false })
      assert.equal(await probe(pol, 'rcode allowed.test denied.test'), '3 3', 'after updateNetwork({allowInternetAccess: false})')
      await pol.updateNetwork({ denyOut: ['11.22.33.44'] })
      assert.equal(await probe(pol, 'rcode allowed.test denied.test'), '0 0', 'after updateNetwork with a deny list only')
      assert.equal(await probe(pol, 'connect 11.22.33.44 7000'), 'ConnectionResetError', 'a denied address')
    } finally {
      await pol.kill()
    }
    // The default network (all): updateNetwork gives it the proxy while it runs.
    const open = await Sandbox.create('base', { metadata: { suite: 'tupper-compat-egress' }, timeoutMs: 120_000 })
    try {
      await open.updateNetwork({ allowOut: ['allowed.test'], denyOut: ['0.0.0.0/0'] })
      assert.equal(await probe(open, 'rcode allowed.test denied.test'), '0 3', 'a sandbox of the default network after updateNetwork')
      assert.equal(await probe(open, 'connect 11.22.33.44 7000'), 'ConnectionResetError', 'an address no allowed name gave')
      await open.updateNetwork({ allowInternetAccess: false })
      assert.equal(await probe(open, 'rcode allowed.test denied.test'), '3 3', 'then updateNetwork({allowInternetAccess: false})')
    } finally {
      await open.kill()
    }
    // denyOut alone: everything but it.
    const deny = await Sandbox.create('base', { network: { denyOut: ['11.22.33.44'] }, metadata: { suite: 'tupper-compat-egress' }, timeoutMs: 120_000 })
    try {
      assert.equal(await probe(deny, 'connect 11.22.33.44 7000'), 'ConnectionResetError', 'a denied address')
      assert.equal(await probe(deny, 'rcode any.test'), '0')
    } finally {
      await deny.kill()
    }
  })

  // The egress proxy's address is checked at create; nothing dials it until the sandbox
  // connects somewhere, which this step does not (the tunnel itself is providers/local's
  // TestSocksEgress, in a lab of its own). compat_test.go's noDial refuses and counts every
  // packet for 11.22.33.44 on this host and fails the run if there is one.
  await step('network.egressProxy: getInfo shows it without the password, updateNetwork without it stops it, a private address is refused', async () => {
    const password = `compat-proxy-password-${process.pid}`
    const px = await Sandbox.create('base', { network: { allowOut: ['allowed.test'], denyOut: ['0.0.0.0/0'], egressProxy: { address: '11.22.33.44:1080', username: 'compat', password } }, metadata: { suite: 'tupper-compat-egress' }, timeoutMs: 120_000 })
    try {
      const info = await px.getInfo()
      assert.deepEqual(info.network?.egressProxy, { address: '11.22.33.44:1080', username: 'compat' })
      assert.ok(!JSON.stringify(info).includes(password), 'getInfo holds the password')
      await px.updateNetwork({ allowOut: ['allowed.test'], denyOut: ['0.0.0.0/0'] })
      assert.equal((await px.getInfo()).network?.egressProxy, undefined, 'after an update without egressProxy')
    } finally {
      await px.kill()
    }
    await assert.rejects(Sandbox.create('base', { network: { egressProxy: { address: '127.0.0.1:1080' } }, metadata: { suite: 'tupper-compat-egress' }, timeoutMs: 60_000 }), /egress proxy/)
  })

  await step('secrets: create, getInfo, update, list, exists, destroy; network.rules naming one', async () => {
    const { Secret, SecretNotFoundError } = sdk
    const name = `compat-${process.pid}`
    const value = `compat-secret-value-${process.pid}`
    const info = await Secret.create(name, value, { metadata: { suite: 'tupper-compat' } })
    assert.match(info.secretId, /^sec_/)
    assert.equal(info.name, name)
    assert.equal(info.version, 1)
    assert.deepEqual(info.metadata, { suite: 'tupper-compat' })
    assert.ok(info.createdAt instanceof Date && !Number.isNaN(info.createdAt.getTime()))
    assert.equal((await Secret.getInfo(name.toUpperCase())).secretId, info.secretId)
    const updated = await Secret.update(info.secretId, value + '-2')
    assert.equal(updated.version, 2)
    assert.deepEqual(updated.metadata, { suite: 'tupper-compat' }, 'an update without metadata keeps it')
    await assert.rejects(Secret.create(name, 'again'), 'a second secret of one name')
    await assert.rejects(Secret.getInfo('compat-missing'), SecretNotFoundError)
    const all = []
    const pages = Secret.list({ limit: 1 })
    while (pages.hasNext) all.push(...(await pages.nextItems()))
    assert.ok(all.some((s) => s.secretId === info.secretId), 'list, a page of one at a time')
    assert.ok(all.every((s) => !('value' in s)))
    // A rule naming it: the egress proxy sets the header outside the sandbox, so nothing in
    // the sandbox holds the value.
    const sb = await Sandbox.create('base', {
      network: { rules: { 'api.compat.test': [{ transform: { headers: { Authorization: `Bearer ${Secret.fill(name)}` } } }] } },
      metadata: { suite: 'tupper-compat-secrets' }, timeoutMs: 60_000,
    })
    try {
      const r = await sb.commands.run(`env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'`, { user: 'root' })
      assert.ok(!r.stdout.includes(value), 'the value is in the sandbox\'s environment')
    } finally {
      await sb.kill()
    }
    await assert.rejects(Sandbox.create('base', {
      network: { rules: { 'api.compat.test': [{ transform: { headers: { Authorization: Secret.fill('compat-missing') } } }] } },
      metadata: { suite: 'tupper-compat-secrets' }, timeoutMs: 60_000,
    }), /compat-missing/, 'a rule naming a missing secret')
    assert.equal(await Secret.exists(name), true)
    assert.equal(await Secret.destroy(name), true)
    assert.equal(await Secret.exists(name), false)
    assert.equal(await Secret.destroy(name), false)
  })

  await step('mcp: {} gives the sandbox an MCP endpoint with Tupper\'s tools for it alone', async () => {
    await assert.rejects(Sandbox.create({ mcp: { github: { githubPersonalAccessToken: 'x' } }, timeoutMs: 60_000, metadata: { suite: 'tupper-compat-mcp-refused' } }),
      (err) => { assert.match(String(err.message), /Failed to start MCP gateway: .*MCP servers from E2B's catalog \(github\) are not available/); return true })
    const left = await Sandbox.list({ query: { metadata: { suite: 'tupper-compat-mcp-refused' } } }).nextItems()
    assert.deepEqual(left, [], 'the SDK killed the sandbox whose gateway failed')
    const m = await Sandbox.create({ mcp: {}, timeoutMs: 120_000 })
    try {
      assert.match(m.getMcpUrl(), new RegExp(`^https://50005-${m.sandboxId}\\..*/mcp$`))
      const token = await m.getMcpToken()
      assert.ok(token && token.length >= 16, `token ${token}`)
      // MCP over streamable HTTP, to the sandbox's port 50005 by E2B's routing headers.
      let session
      const rpc = async (body, tok = token) => {
        const headers = { 'E2b-Sandbox-Id': m.sandboxId, 'E2b-Sandbox-Port': '50005', 'Content-Type': 'application/json',
          Accept: 'application/json, text/event-stream', Authorization: `Bearer ${tok}` }
        if (session) headers['Mcp-Session-Id'] = session
        const r = await fetch(new URL('/mcp', process.env.E2B_SANDBOX_URL), { method: 'POST', headers, body: JSON.stringify(body) })
        session ??= r.headers.get('mcp-session-id') ?? undefined
        const text = await r.text()
        const data = text.split('\n').filter((l) => l.startsWith('data: ')).map((l) => JSON.parse(l.slice(6)))
        return { status: r.status, msg: data.at(-1) ?? (text && r.headers.get('content-type')?.includes('json') ? JSON.parse(text) : undefined) }
      }
      const denied = await rpc({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'compat', version: '1' } } }, 'f'.repeat(36))
      assert.equal(denied.status, 401, 'a wrong token is refused')
      const init = await rpc({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'compat', version: '1' } } })
      assert.equal(init.status, 200)
      assert.ok(init.msg?.result?.serverInfo, JSON.stringify(init.msg))
      assert.ok(session, 'an MCP session id')
      await rpc({ jsonrpc: '2.0', method: 'notifications/initialized' })
      const list = await rpc({ jsonrpc: '2.0', id: 2, method: 'tools/list' })
      assert.ok(list.msg.result.tools.some((t) => t.name === 'run_command'), 'run_command is listed')
      const run = await rpc({ jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'run_command', arguments: { command: 'echo from-mcp > /tmp/mcp.txt; echo done' } } })
      assert.equal(run.msg.result.isError ?? false, false, JSON.stringify(run.msg))
      assert.equal(await m.files.read('/tmp/mcp.txt'), 'from-mcp\n', 'the tool ran in this sandbox')
      const other = await rpc({ jsonrpc: '2.0', id: 4, method: 'tools/call', params: { name: 'run_command', arguments: { command: 'true', sandbox_id: sbx.sandboxId } } })
      assert.equal(other.msg.result.isError, true, 'another sandbox is out of reach')
      const made = await rpc({ jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'create_sandbox', arguments: {} } })
      assert.equal(made.msg.result.isError, true, 'the endpoint creates no sandboxes')
    } finally {
      await m.kill()
    }
  })

  await step('Template.exists: base exists, another alias does not', async () => {
    assert.equal(await Template.exists('base'), true)
    assert.equal(await Template.exists(`no-such-template-${process.pid}`), false)
  })

  await step('Template.build from a template: copy (symlinks kept), env, workdir, runCmd as root, a start command; then Sandbox.create(alias) and its tag, commands in its workdir; tags name their build', async () => {
    const { mkdtempSync, writeFileSync, mkdirSync, symlinkSync } = await import('node:fs')
    const { join } = await import('node:path')
    const { tmpdir } = await import('node:os')
    const dir = mkdtempSync(join(tmpdir(), 'e2b-template-'))
    writeFileSync(join(dir, 'hello.txt'), 'hello from the template SDK\n')
    // Symlinks with absolute targets, in a tree and on their own: copied as links.
    mkdirSync(join(dir, 'tree'))
    writeFileSync(join(dir, 'tree', 'file.txt'), 'in the tree\n')
    symlinkSync('/etc/hostname', join(dir, 'tree', 'abs'))
    symlinkSync('/etc/hostname', join(dir, 'abslink'))
    const name = `sdk-${sdkVersion.replaceAll('.', '-')}-${process.pid}`
    const tpl = Template({ fileContextPath: dir })
      .fromTemplate(process.env.TUPPER_TEST_TEMPLATE)
      .copy('hello.txt', '/app/')
      .copy('tree', '/app/tree', { resolveSymlinks: false })
      .copy('abslink', '/app/abslink', { resolveSymlinks: false })
      .setEnvs({ GREETING: 'hi there', QUOTED: 'a "$b" `c` \\d' })
      .setWorkdir('/app')
      .runCmd(`cat hello.txt > built.txt && echo from-the-run-step-of-${name} && id -u > uid.txt`, { user: 'root' })
      .setStartCmd('echo started > /tmp/started', 'test -f /tmp/started')
    const logs = []
    const info = await Template.build(tpl, `${name}:v1`, { onBuildLogs: (e) => logs.push(e.message) })
    assert.equal(info.templateId, name)
    assert.ok(logs.some((m) => m === `from-the-run-step-of-${name}`), logs.join('\n'))
    assert.ok(logs.some((m) => /Uploaded 'hello.txt'/.test(m)), logs.join('\n'))
    assert.equal(await Template.exists(name), true)
    for (const alias of [name, `${name}:v1`]) {
      const sb = await Sandbox.create(alias)
      try {
        const r = await sb.commands.run('cat /app/built.txt /app/uid.txt /tmp/started; echo "$GREETING"; echo "$QUOTED"')
        assert.equal(r.stdout, 'hello from the template SDK\n0\nstarted\nhi there\na "$b" `c` \\d\n')
        // setWorkdir is where a command without a cwd runs, as on E2B.
        const w = await sb.commands.run('pwd; cat tree/file.txt; readlink tree/abs; readlink abslink')
        assert.equal(w.stdout, '/app\nin the tree\n/etc/hostname\n/etc/hostname\n')
      } finally {
        await sb.kill()
      }
    }
    const tags = await Template.getTags(name)
    assert.deepEqual(tags.map((t) => t.tag), ['v1'])
    assert.ok(info.buildId, JSON.stringify(info))
    assert.equal(tags[0].buildId, info.buildId)
    const assigned = await Template.assignTags(`${name}:v1`, 'prod')
    assert.equal(assigned.buildId, info.buildId)
    assert.deepEqual((await Template.getTags(name)).map((t) => t.tag).sort(), ['prod', 'v1'])
    await Template.removeTags(name, 'prod')
    assert.deepEqual((await Template.getTags(name)).map((t) => t.tag), ['v1'])
    // E2B's CLI lists templates with GET /templates (v1) and /v2/templates.
    const { ApiClient, ConnectionConfig } = sdk
    const api = new ApiClient(new ConnectionConfig()).api
    for (const path of ['/templates', '/v2/templates']) {
      const res = await api.GET(path, {})
      assert.equal(res.response.status, 200, path)
      const mine = res.data.find((t) => t.templateID === name)
      assert.ok(mine, `${path}: ${JSON.stringify(res.data.map((t) => t.templateID))}`)
      assert.equal(mine.buildStatus, 'ready')
      assert.ok(mine.aliases.includes(`${name}:v1`), JSON.stringify(mine))
      assert.ok(res.data.some((t) => t.templateID === 'base'), path)
    }
  })

  await step('Template.build: a failing step is a BuildError naming it; an image no registry serves fails', async () => {
    const failing = Template().fromTemplate(process.env.TUPPER_TEST_TEMPLATE).runCmd('echo going down; exit 7')
    await assert.rejects(Template.build(failing, `sdk-broken-${process.pid}`), (err) => {
      assert.ok(err instanceof BuildError, `got ${err?.constructor?.name}: ${err}`)
      assert.match(err.message, /exit code 7/)
      return true
    })
    assert.equal(await Template.exists(`sdk-broken-${process.pid}`), false)
    await assert.rejects(Template.build(Template().fromImage('127.0.0.1:1/nothing:1'), `sdk-noimage-${process.pid}`), (err) => {
      assert.ok(err instanceof BuildError, `got ${err?.constructor?.name}: ${err}`)
      return true
    })
  })

  await step('volumes: create, list, content API, volumeMounts shared by two sandboxes, a planted symlink not followed, destroy', async () => {
    const name = `compat-vol-${process.pid}`
    const vol = await Volume.create(name)
    assert.equal(vol.name, name)
    assert.ok((await Volume.list()).some((v) => v.name === name && v.volumeId === vol.volumeId))
    assert.equal((await Volume.getInfo(vol.volumeId)).name, name)
    await vol.makeDir('/dir/sub', { force: true })
    await vol.writeFile('/dir/hello.txt', 'hello volume')
    assert.equal(await vol.readFile('/dir/hello.txt'), 'hello volume')
    assert.deepEqual((await vol.list('/dir')).map((e) => e.name).sort(), ['hello.txt', 'sub'])
    assert.equal((await vol.getInfo('/dir/sub')).type, 'directory')
    const a = await Sandbox.create('base', { volumeMounts: { '/data': vol } })
    const b = await Sandbox.create('base', { volumeMounts: { '/mnt/v': name } })
    try {
      assert.equal((await a.commands.run('cat /data/dir/hello.txt')).stdout, 'hello volume')
      // A new volume's root is root's (0755), as a new directory of the host's would be.
      await b.commands.run('echo from-b > /mnt/v/b.txt', { user: 'root' })
      assert.equal((await a.commands.run('cat /data/b.txt')).stdout, 'from-b\n')
      assert.equal(await vol.readFile('/b.txt'), 'from-b\n')
      // A sandbox plants links to host paths: the host never follows them.
      await a.commands.run('ln -s /etc/hostname /data/link && ln -s / /data/rootlink', { user: 'root' })
      await assert.rejects(vol.readFile('/link'))
      await assert.rejects(vol.readFile('/rootlink/etc/passwd'))
      await assert.rejects(vol.writeFile('/rootlink/tmp/escaped', 'x'))
      const link = await vol.getInfo('/link')
      assert.equal(link.type, 'symlink')
      assert.equal(link.target, '/etc/hostname')
      await assert.rejects(Volume.destroy(vol.volumeId), /mounted by sandbox/)
    } finally {
      await a.kill()
      await b.kill()
    }
    await vol.remove('/dir')
    assert.equal(await vol.exists('/dir'), false)
    assert.equal(await Volume.destroy(vol.volumeId), true)
    assert.equal(await Volume.destroy(vol.volumeId), false)
  })

  await step('setTimeout moves endAt', async () => {
    await sbx.setTimeout(30_000)
    const info = await sbx.getInfo()
    const left = info.endAt.getTime() - Date.now()
    assert.ok(left > 20_000 && left <= 31_000, `endAt is ${left} ms away, want about 30 s`)
    await sbx.setTimeout(120_000)
  })

  await step('sandbox logs through the SDK\'s API client (v2 and v1 paths)', async () => {
    const { ApiClient, ConnectionConfig } = sdk
    const api = new ApiClient(new ConnectionConfig()).api
    const path = { sandboxID: sbx.sandboxId }
    const v2 = await api.GET('/v2/sandboxes/{sandboxID}/logs', { params: { path, query: { direction: 'forward' } } })
    assert.equal(v2.response.status, 200)
    const messages = v2.data.logs.map((e) => e.message)
    assert.equal(messages[0], 'sandbox.created', messages.join(', '))
    assert.ok(messages.includes('sandbox.timeout_set'), messages.join(', '))
    for (const e of v2.data.logs) {
      assert.ok(!Number.isNaN(Date.parse(e.timestamp)) && e.level === 'info' && typeof e.fields === 'object', JSON.stringify(e))
    }
    const newest = await api.GET('/v2/sandboxes/{sandboxID}/logs', { params: { path, query: { limit: 1 } } })
    assert.deepEqual(newest.data.logs, v2.data.logs.slice(-1))
    const v1 = await api.GET('/sandboxes/{sandboxID}/logs', { params: { path } })
    assert.equal(v1.response.status, 200)
    assert.deepEqual(v1.data.logEntries, v2.data.logs)
    assert.match(v1.data.logs[0].line, /^sandbox\.created /)
    const missing = await api.GET('/v2/sandboxes/{sandboxID}/logs', { params: { path: { sandboxID: 'nosuchsandbox' } } })
    assert.equal(missing.response.status, 404)
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
    // A port of it, as E2B's proxy answers: 502 too, with a key or without.
    for (const key of [undefined, process.env.E2B_API_KEY]) {
      const port = await fetch(`${process.env.E2B_SANDBOX_URL}/`, {
        headers: { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '8080', ...(key ? { 'X-API-Key': key } : {}) },
      })
      assert.equal(port.status, 502)
      assert.deepEqual(await port.json(), { sandboxId: id, message: 'The sandbox was not found', code: 502 })
    }
  })

  console.log(failed ? `${failed} step(s) failed` : 'all steps passed')
  return failed
}
