"""The stream relay's own CPU per text frame, for each API, in process.

Run: .venv/bin/python -m bench relay_apis

`bench stream` runs Chat streams through `turngate serve`; this shows what the relay alone
(`StreamRelay.feed`: SSE framing, the API's decoder, the assembler, the encoder) costs per
text frame of each API, so a gap between the APIs shows before it shows in a process. Each
API's recorded text stream from ../shared/fixtures is fed up to its second text frame, then
that frame N times more (Responses frames renumbered, as a provider numbers them), for a
short and a long answer: a cost per frame that grows with the answer's length (a string
grown by copying, say) shows as a larger second column. CPU time of this process, best of 3.

Then `bench stream`'s own streams of each API, text and tool arguments, per frame: the
argument paths (held fragments, Vertex's streamed ``partialArgs``) next to the text ones.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from turngate.adapters.relay import StreamRelay
from turngate.adapters.sse import SSEDecoder

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"
# API -> (recorded text stream, bytes that mark one of its text frames)
STREAMS = {
    "openai_chat": ("openai-chat/cc-text-only.sse", b'"content":"'),
    "openai_responses": ("openai-responses/cc-text-only.sse", b"response.output_text.delta"),
    "anthropic": ("anthropic/lla-text-only.sse", b'"text_delta"'),
    "gemini": ("gemini/pai-text-only.sse", b'"text"'),
}
LENGTHS = (2_000, 50_000)


def frames_of(path: Path) -> list[bytes]:
    decoder = SSEDecoder()
    return [frame.raw for frame in decoder.feed(path.read_bytes()) + decoder.close()]


def per_frame(api: str, frames: list[bytes], at: int, count: int) -> float:
    """Seconds of CPU per text frame ``frames[at]`` repeated ``count`` times, after the
    stream's opening."""
    relay = StreamRelay(api)
    for frame in frames[:at]:
        relay.feed(frame)
    text, reads = frames[at], []
    for n in range(count):
        if api == "openai_responses":
            text = re.sub(rb'"sequence_number":\d+', b'"sequence_number":%d' % (10_000 + n), text)
        reads.append(text)
    started = time.process_time()
    for read in reads:
        relay.feed(read)
    spent = time.process_time() - started
    if relay.failed:
        raise RuntimeError(f"{api}: the repeated text frame failed the stream")
    return spent / count


def per_chunk(api: str, frames: list[bytes], rounds: int = 5) -> float:
    """Seconds of CPU per frame of a whole stream fed one frame a read, best of ``rounds``
    (each a fresh relay, ended with ``finish``)."""
    best = float("inf")
    for _ in range(rounds):
        relay = StreamRelay(api)
        started = time.process_time()
        for frame in frames:
            relay.feed(frame)
        _tail, outcome = relay.finish()
        best = min(best, time.process_time() - started)
        if relay.failed:
            raise RuntimeError(f"{api}: the bench stream failed: {outcome}")
    return best / len(frames)


def bench_streams() -> None:
    """``bench stream``'s two streams of each API (bench/stream_overhead.py: 500 chunks of
    text, and a tool call whose arguments come in 500 chunks), per frame, the turn's end
    included."""
    from bench.stream_overhead import APIS

    print("\nStreamRelay per frame of bench stream's 500-chunk streams, in process, best of 5 (us)")
    print(f"{'':<18}{'text':>10}{'tool arguments':>16}")
    for name, api in APIS.items():
        text, tools = per_chunk(name, api.text(500)), per_chunk(name, api.tools(500))
        print(f"{name:<18}{text * 1e6:10.2f}{tools * 1e6:16.2f}")


def main() -> None:
    if not FIXTURES.is_dir():
        print(f"recorded fixtures ABSENT ({FIXTURES}): recorded frames not measured")
        bench_streams()
        return
    print("StreamRelay per text frame, in process, best of 3 (us)")
    print(f"{'':<18}" + "".join(f"{f'{n:,} frames':>16}" for n in LENGTHS))
    for api, (name, marker) in STREAMS.items():
        frames = frames_of(FIXTURES / name)
        texts = [i for i, frame in enumerate(frames) if marker in frame]
        at = texts[1] if len(texts) > 1 else texts[0]
        costs = [min(per_frame(api, frames, at, n) for _ in range(3)) for n in LENGTHS]
        print(f"{api:<18}" + "".join(f"{cost * 1e6:16.2f}" for cost in costs) + f"  {name}")
    bench_streams()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
