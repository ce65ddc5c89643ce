"""A torch TCPStore client pointed at braid's store (BRAID_STORE_PORT under braidrun) by
mistake: test_braidrun.py checks that braidrun's output says what it was. torch's client
cannot read braid's greeting and may abort in a thread of its own, which nothing here catches."""
import datetime
import os

from torch.distributed import TCPStore

print("connecting", flush=True)
store = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["BRAID_STORE_PORT"]), 1, False,
                 datetime.timedelta(seconds=5))
print("got", store.get("key"), flush=True)
