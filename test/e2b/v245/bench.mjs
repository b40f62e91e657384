// Runs ../bench.mjs (tupper bench --api) with the e2b version this project pins.
import * as sdk from 'e2b'
import { createRequire } from 'node:module'
import { bench } from '../bench.mjs'

const { version } = createRequire(import.meta.url)('e2b/package.json')
await bench(sdk, version, Number(process.argv[2] ?? 100))
