// Runs ../compat.mjs with the e2b version this project pins.
import * as sdk from 'e2b'
import { createRequire } from 'node:module'
import { run } from '../compat.mjs'

const { version } = createRequire(import.meta.url)('e2b/package.json')
const failed = await run(sdk, version)
process.exit(failed ? 1 : 0)
