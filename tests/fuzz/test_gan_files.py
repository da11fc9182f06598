"""Where a trained DCGAN is written (:class:`GanFiles`)."""

from pathlib import Path

from deepfault.fuzz.fidelity.gan import GanFiles


def test_the_default_names_follow_the_data_set_and_the_discriminator():
    assert GanFiles().paths("mnist") == (Path("dcgan-mnist-discriminator.pt"),
                                         Path("dcgan-mnist-discriminator.generator.pt"))
    assert GanFiles("d/x.pt").paths("data/set.npz") == (Path("d/x.pt"), Path("d/x.generator.pt"))
    assert GanFiles("x.pt", "g.pt").paths("mnist") == (Path("x.pt"), Path("g.pt"))
    assert GanFiles(".").paths("mnist") == (Path("."), None)


def test_an_epoch_sees_at_most_the_training_split():
    from deepfault.fuzz.fidelity.gan import GanConfig

    assert GanConfig(images_per_epoch=100).per_epoch(60) == 60
    assert GanConfig(images_per_epoch=100).per_epoch(600) == 100
    assert GanConfig(images_per_epoch="all").per_epoch(600) == 600
