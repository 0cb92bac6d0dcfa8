"""nostall: data loading for deep-learning training, without data stalls.

```python
import nostall

loader = nostall.Loader("data/train", batch_size=16, shuffle=True,
                        transforms=[nostall.RandomResizedCrop(224),
                                    nostall.RandomHorizontalFlip(),
                                    nostall.Normalize(nostall.IMAGENET_MEAN,
                                                      nostall.IMAGENET_STD)])
for epoch in range(2):
    loader.set_epoch(epoch)
    for images, labels in loader:
        ...
print(loader.stats_table())
```

README.md and docs/ say more; docs/from_torch.md maps torch's DataLoader
and torchvision onto it.
"""

from . import _arrow  # noqa: F401  (Arrow's libraries, before the module that needs them)
from . import audio, detection, ray, video
from . import _nostall
from ._nostall import available_cores
from .analyze import Analysis, analyze
from .trace import TraceAnalysis, analyze_trace
from .cache import Cache
from .errors import DataError, NostallError, ResourceError
from .loader import Loader
from .shared import Server, list_shared, serve
from .transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    CenterCrop,
    Normalize,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    Transform,
)

__version__ = _nostall.__version__

__all__ = [
    "Loader", "Cache", "DataError", "NostallError", "ResourceError", "Transform", "RandomResizedCrop",
    "Resize", "CenterCrop", "RandomHorizontalFlip", "Normalize", "IMAGENET_MEAN", "IMAGENET_STD",
    "available_cores", "audio", "detection", "video", "analyze", "Analysis", "analyze_trace", "TraceAnalysis", "serve", "Server", "list_shared",
]
