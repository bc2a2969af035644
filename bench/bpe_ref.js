// Reference GPT-2 encoding (js-tiktoken, installed by `make deps`):
//   node bench/bpe_ref.js TEXT [OUT.u16]
// prints "bytes seconds" of the encode, and writes the ids to OUT.u16 as
// uint16 little-endian.
// <|endoftext|> in the text is the special token, as `cubist prepare` reads it.
const path = require('path');
const fs = require('fs');
const { getEncoding } = require(path.join(__dirname, '..', 'deps', 'node_modules', 'js-tiktoken'));
const [text, out] = process.argv.slice(2);
const enc = getEncoding('gpt2');
const buf = fs.readFileSync(text);
const s = buf.toString('utf8');
const t0 = process.hrtime.bigint();
const ids = enc.encode(s, 'all');
const sec = Number(process.hrtime.bigint() - t0) / 1e9;
if (out) fs.writeFileSync(out, Buffer.from(Uint16Array.from(ids).buffer));
console.log(`${buf.length} ${sec}`);
