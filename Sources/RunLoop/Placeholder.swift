// placeholder until the layer lands
enum _PlaceholderRunLoop {}
