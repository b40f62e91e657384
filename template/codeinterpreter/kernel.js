// The JavaScript context of tupper's code-interpreter server (server.py): one Node.js
// process per context, its variables kept in one vm context between cells. It reads one JSON
// request a line on stdin, {"code", "env"}, and writes JSON lines on stdout: {"type":
// "stdout"|"stderr", "text"}, {"type": "result", "text"}, {"type": "error", "name", "value",
// "traceback"}, then {"type": "done", "count"}. SIGINT stops a cell that runs synchronously
// (vm's breakOnSigint) or stops waiting for one that awaits.
'use strict'
const vm = require('node:vm')
const util = require('node:util')
const readline = require('node:readline')

const out = (obj) => process.stdout.write(JSON.stringify(obj) + '\n')
const print = (type) => (...args) => out({ type, text: util.format(...args) + '\n' })

const sandbox = {
  console: {
    log: print('stdout'), info: print('stdout'), debug: print('stdout'),
    error: print('stderr'), warn: print('stderr'), trace: print('stderr'),
    dir: (o) => out({ type: 'stdout', text: util.inspect(o) + '\n' }),
  },
  require, process, Buffer, URL, URLSearchParams, TextEncoder, TextDecoder, fetch: globalThis.fetch,
  setTimeout, clearTimeout, setInterval, clearInterval, setImmediate, clearImmediate, queueMicrotask,
  structuredClone, AbortController, performance,
}
sandbox.globalThis = sandbox
const context = vm.createContext(sandbox)

let count = 0
let interrupt = null // rejects the await of the running cell
process.on('SIGINT', () => { if (interrupt) interrupt(new Error('KeyboardInterrupt')) })

// compile returns the cell as a script. A cell that awaits at its top level runs as an async
// function (its declarations stay its own) whose value is its last expression statement's,
// when that statement can be told apart (else it has none).
function compile(code) {
  const filename = `cell[${count}]`
  try {
    return new vm.Script(code, { filename })
  } catch (e) {
    if (!/await/.test(code)) throw e
  }
  const lines = code.trimEnd().split('\n')
  const last = lines.pop()
  const cut = last.replace(/;\s*$/, '').lastIndexOf(';')
  const head = lines.join('\n') + '\n' + last.slice(0, cut + 1)
  const tail = last.slice(cut + 1).replace(/;\s*$/, '')
  const statement = /^\s*(const|let|var|return|if|for|while|do|throw|function|class|try|switch)\b|^\s*[{}]|^\s*$/
  const bodies = statement.test(tail) ? [] : [head + '\nreturn (' + tail + ')']
  bodies.push(code)
  for (const [i, body] of bodies.entries()) {
    try {
      return new vm.Script(`(async () => {\n${body}\n})()`, { filename, lineOffset: -1 })
    } catch (e) {
      if (i === bodies.length - 1) throw e
    }
  }
}

async function run(code, env) {
  count++
  const saved = {}
  for (const [k, v] of Object.entries(env || {})) {
    saved[k] = process.env[k]
    process.env[k] = v
  }
  try {
    let value = compile(code).runInContext(context, { breakOnSigint: true, displayErrors: false })
    if (value && typeof value.then === 'function') {
      value = await Promise.race([value, new Promise((_, reject) => { interrupt = reject })])
    }
    if (value !== undefined) out({ type: 'result', text: typeof value === 'string' ? util.inspect(value) : util.inspect(value, { depth: 4 }) })
  } catch (e) {
    // An error of the cell's context is not an instance of this one's Error.
    const err = e && typeof e === 'object' && 'message' in e ? e : new Error(String(e))
    const name = /Script execution was interrupted/.test(err.message) ? 'KeyboardInterrupt' : err.name
    out({ type: 'error', name: name || 'Error', value: String(err.message), traceback: String(err.stack || err) })
  } finally {
    interrupt = null
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k]
      else process.env[k] = v
    }
  }
  out({ type: 'done', count })
}

// One cell at a time, in the order they come.
let queue = Promise.resolve()
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  const req = JSON.parse(line)
  queue = queue.then(() => run(req.code, req.env))
})
out({ type: 'ready' })
